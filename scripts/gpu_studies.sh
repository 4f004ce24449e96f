#!/usr/bin/env bash
# Runs tuned sweeps on a GPU machine (scripts/gpu_build.sh first), several at a time, each run on
# CUDA with one CPU thread, and stops them all (Ctrl-C, as a user would: finished runs are kept, a
# re-run carries on) when a wall-clock budget is spent. Sweeps start in the order given; at most
# MAX_SWEEPS run at once, each with --jobs JOBS. Each sweep's directory is runs/sweeps/<name> as its
# file says; its log goes to <log dir>/<name>.log.
#   scripts/gpu_studies.sh BUDGET_S LOG_DIR SWEEP.yaml [SWEEP.yaml ...]
# Environment: MAX_SWEEPS (4), JOBS (4), NORMLAB_BIN (build-gpu/normlab), EXTRA_SETS (more --set args).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
budget="$1"; logs="$2"; shift 2
BIN="${NORMLAB_BIN:-build-gpu/normlab}"
[ -f "$(dirname "$BIN")/env.sh" ] && source "$(dirname "$BIN")/env.sh"
mkdir -p "$logs"
start=$SECONDS
pids=()
names=()
queue=("$@")
launch() {
  local f="$1" n
  n="$(basename "$f" .yaml)"
  echo "$(date +%T) start $n" | tee -a "$logs/schedule.log"
  setsid "$BIN" sweep -c "$f" --jobs "${JOBS:-4}" --set train.device=cuda --set train.threads=1 ${EXTRA_SETS:-} \
    > "$logs/$n.log" 2>&1 &
  pids+=($!)
  names+=("$n")
}
while :; do
  running=0
  for i in "${!pids[@]}"; do
    if kill -0 "${pids[$i]}" 2>/dev/null; then
      running=$((running + 1))
    elif [ -n "${names[$i]}" ]; then
      wait "${pids[$i]}"; echo "$(date +%T) end ${names[$i]} rc=$? after $((SECONDS - start)) s" | tee -a "$logs/schedule.log"
      names[$i]=""
    fi
  done
  while [ "$running" -lt "${MAX_SWEEPS:-4}" ] && [ "${#queue[@]}" -gt 0 ]; do
    launch "${queue[0]}"; queue=("${queue[@]:1}"); running=$((running + 1))
  done
  [ "$running" -eq 0 ] && [ "${#queue[@]}" -eq 0 ] && break
  if [ $((SECONDS - start)) -ge "$budget" ]; then
    echo "$(date +%T) budget of $budget s spent: stopping" | tee -a "$logs/schedule.log"
    for i in "${!pids[@]}"; do [ -n "${names[$i]}" ] && kill -INT -- "-${pids[$i]}" 2>/dev/null; done
    sleep 15
    for i in "${!pids[@]}"; do [ -n "${names[$i]}" ] && kill -KILL -- "-${pids[$i]}" 2>/dev/null; done
    break
  fi
  sleep 2
done
echo "$(date +%T) done after $((SECONDS - start)) s" | tee -a "$logs/schedule.log"
