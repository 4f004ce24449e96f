#!/usr/bin/env python3
"""The weights' geometry at the end of a tuned sweep's confirm runs, per arm: a markdown table.

    scripts/weight_geometry.py runs/sweeps/tuned_optim_adamw runs/sweeps/tuned_optim_muon

For each tuned sweep directory given, for each arm of its summary (summary.json, tune.arms[]), the
confirm runs at the arm's selected value (runs/<arm>,<key>=<value>,confirm,seed=<s>/) are read
with `normlab report --json` (the weight statistics of the run's last full-diagnostics step:
layers.w_rms, layers.w_spec_max, layers.w_stable_rank, layers.update_cos, one value per block;
src/metrics/README.md), averaged over the blocks, then over the confirm seeds (mean, and the
smallest and largest seed). One table row per arm and sweep, the sweeps' rows side by side per arm,
so an AdamW sweep and a Muon sweep of the same arms compare line by line. Runs not finished are
left out (the row says how many seeds it has).

--normlab PATH: the binary whose `report --json` is read (default: $NORMLAB_BINARY, else
build/normlab in the repository).
"""
import argparse
import json
import os
import subprocess
import sys

STATS = ["w_rms", "w_spec_max", "w_stable_rank", "update_cos"]


def report(binary, run):
    out = subprocess.run([binary, "report", run, "--json"], check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def arm_rows(binary, sweep_dir):
    with open(os.path.join(sweep_dir, "summary.json")) as f:
        summary = json.load(f)
    tune = summary.get("tune")
    if not tune:
        sys.exit(f"weight_geometry: {sweep_dir} is not a tuned sweep (summary.json has no tune)")
    runs_dir = os.path.join(sweep_dir, "runs")
    points = {}
    for name in sorted(os.listdir(runs_dir)):
        try:
            with open(os.path.join(runs_dir, name, "point.json")) as f:
                points[name] = json.load(f)
        except (OSError, ValueError):
            continue
    rows = {}
    for arm in tune["arms"]:
        selected = arm.get("selected")
        per_seed = []
        for name, p in points.items():
            if ",confirm," not in name or p.get("status") != "done":
                continue
            ov = p.get("overrides", {})
            if any(ov.get(k) is None or str(ov.get(k)) != str(v) for k, v in arm["axes"].items()):
                continue
            if selected is None or abs(float(ov.get(tune["key"], "nan")) - selected) > 1e-12 * max(1.0, abs(selected)):
                continue
            layers = report(binary, os.path.join(runs_dir, name)).get("layers", {})
            vals = {}
            for s in STATS:
                xs = [x for x in layers.get(s, []) if x is not None]
                vals[s] = sum(xs) / len(xs) if xs else float("nan")
            per_seed.append(vals)
        rows[arm["name"]] = (selected, per_seed)
    return tune["key"], rows


def cell(per_seed, stat, fmt):
    xs = [v[stat] for v in per_seed]
    if not xs:
        return "-"
    mean = sum(xs) / len(xs)
    return f"{mean:{fmt}} ({min(xs):{fmt}}-{max(xs):{fmt}})"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("sweeps", nargs="+", help="tuned sweep directories (summary.json, runs/)")
    ap.add_argument("--normlab", default=os.environ.get("NORMLAB_BINARY") or
                    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "normlab"))
    args = ap.parse_args()
    tables = [(d, *arm_rows(args.normlab, d)) for d in args.sweeps]
    print("| arm | sweep | selected | seeds | w_rms | w_spec_max | w_stable_rank | update_cos |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    arms = []
    for _, _, rows in tables:
        arms += [a for a in rows if a not in arms]
    for arm in arms:
        for d, key, rows in tables:
            if arm not in rows:
                continue
            selected, per_seed = rows[arm]
            sel = "-" if selected is None else f"{key}={selected:.1e}"
            print(f"| {arm} | {os.path.basename(os.path.normpath(d))} | {sel} | {len(per_seed)} | "
                  f"{cell(per_seed, 'w_rms', '.4f')} | {cell(per_seed, 'w_spec_max', '.2f')} | "
                  f"{cell(per_seed, 'w_stable_rank', '.1f')} | {cell(per_seed, 'update_cos', '.3f')} |")


if __name__ == "__main__":
    main()
