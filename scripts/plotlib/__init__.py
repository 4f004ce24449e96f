"""scripts/plot.py's parts. Reading and drawing are apart, and no part derives a number:

    read.py           reading a run (metrics.jsonl, config.yaml, `normlab report --json RUN`) and a
                      sweep (`normlab report --json SWEEP`, else summary.csv; runs/*/point.json);
                      standard library only, no matplotlib
    draw.py           what the figures share: matplotlib set-up, saving, log axes, colours
    run_figures.py    RUN_FIGURES, the table of a run's figures: (file name, function, what it needs)
    sweep_figures.py  SWEEP_FIGURES, the same for a sweep

Every number a figure shows, or places a line or marker at, is a value of the records
(metrics.jsonl, read for the curves), of `normlab report --json` or of the sweep summary (the
binary's src/metrics/records.cpp defines each once). tests/scripts/plot_test.sh checks it.
"""
