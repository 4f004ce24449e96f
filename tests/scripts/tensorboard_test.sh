#!/usr/bin/env bash
# TensorBoard event files read back by the `tensorboard` Python package (installed by
# scripts/setup.sh into a folder of NormLab's own, scripts/torch_env.sh): a tiny run's event file
# holds the train loss at every logged step equal to metrics.jsonl's as float32, the validation loss
# of every eval record, and the per-layer gradient norm of every block at every logged step; the
# same again after `normlab export-tb` rewrote the directory, and after a resume (no events of
# steps the resume dropped). Run from the repository root (CTest does):
#   tests/scripts/tensorboard_test.sh NORMLAB_BIN
set -euo pipefail

BIN=${1:?usage: tests/scripts/tensorboard_test.sh NORMLAB_BIN}
BIN=$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
source "$ROOT/scripts/torch_env.sh"
[ -f "$NORMLAB_TENSORBOARD_PREFIX/.complete" ] || { echo "tensorboard_test: FAIL: no tensorboard package in $NORMLAB_TENSORBOARD_PREFIX (scripts/setup.sh installs it)" >&2; exit 1; }
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/normlab_tb_test.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
cd "$ROOT"

fail() { echo "tensorboard_test: FAIL: $*" >&2; exit 1; }

train() {  # OUT STEPS [extra args]
  local out=$1 steps=$2; shift 2
  "$BIN" train -c configs/default.yaml \
    --set model.d_model=32 --set model.n_heads=2 --set model.n_layers=3 --set model.d_ff=64 \
    --set model.ctx=32 --set train.batch_size=4 --set train.steps="$steps" --set train.log_every=2 \
    --set diag.every=4 --set eval.every=6 --set eval.max_windows=4 --set optim.warmup=5 \
    --set train.checkpoint_every=6 "$@" --out "$out" >"$TMP/train.out" 2>"$TMP/train.log" \
    || { cat "$TMP/train.log" >&2; fail "normlab train $out"; }
}

check() {  # RUN
  PYTHONPATH="$NORMLAB_TENSORBOARD_PREFIX" python3 - "$1" 3 <<'PY' || fail "event file of $1"
import glob, json, os, sys
import numpy as np
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
run, L = sys.argv[1], int(sys.argv[2])
files = glob.glob(os.path.join(run, "tensorboard", "events.out.tfevents.*"))
assert len(files) == 1, files
ea = EventAccumulator(os.path.join(run, "tensorboard"), size_guidance={"scalars": 0})
ea.Reload()
recs = [json.loads(l) for l in open(os.path.join(run, "metrics.jsonl")) if l.strip()]
train = [r for r in recs if r["kind"] == "train"]
evals = [r for r in recs if r["kind"] == "eval"]
assert len(train) >= 5, len(train)
steps = [e.step for e in ea.Scalars("train/loss")]
assert steps == [r["step"] for r in train], (steps, [r["step"] for r in train])  # each once, in order
loss = {e.step: e.value for e in ea.Scalars("train/loss")}
for r in train:
    assert loss[r["step"]] == float(np.float32(r["loss"])), (r["step"], loss[r["step"]], r["loss"])
val = {e.step: e.value for e in ea.Scalars("eval/val_loss")}
assert val == {r["step"]: float(np.float32(r["val_loss"])) for r in evals}, val
for i in range(L):
    g = {e.step: e.value for e in ea.Scalars("grad_norm/blocks.%d" % i)}
    assert g == {r["step"]: float(np.float32(r["layers"]["grad_norm"][i])) for r in train}, (i, g)
act = ea.Scalars("act_rms/out")  # the stream after the last block, on full-diagnostics steps
assert len(act) >= 2, len(act)
print("tensorboard_test: %s: %d train steps, %d evals, %d tags" % (run, len(train), len(evals), len(ea.Tags()["scalars"])))
PY
}

train "$TMP/run" 14
check "$TMP/run"
# export-tb writes the directory anew from metrics.jsonl: the same scalars.
rm -rf "$TMP/run/tensorboard"
"$BIN" export-tb "$TMP/run" > "$TMP/export.out" || fail "normlab export-tb"
grep -q "$TMP/run/tensorboard/events.out.tfevents." "$TMP/export.out" || fail "export-tb printed $(cat "$TMP/export.out")"
check "$TMP/run"
# A resume from step 6 of a run that had logged up to step 13: the event file is rewritten from the
# kept records, then continues: one value per step, equal to metrics.jsonl.
train "$TMP/res" 14
rm -rf "$TMP/res/checkpoints/step_00000012" "$TMP/res/checkpoints/step_00000014"
echo step_00000006 > "$TMP/res/checkpoints/LATEST"
train "$TMP/res" 14 --resume
check "$TMP/res"
echo "tensorboard_test: OK"
