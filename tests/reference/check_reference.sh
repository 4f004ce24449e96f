#!/usr/bin/env bash
# Contract check: checkpoints of many layout x norm x option combinations, evaluated and sampled
# by normlab and by scripts/reference_model.py (an independent numpy implementation written from
# the contract in src/model/README.md alone), must agree: eval loss to 1e-4 relative, identical greedy samples.
# Usage: check_reference.sh NORMLAB_BINARY [K/N]   (run from the repository root)
# K/N: shard K of N, every N-th case from the K-th (CTest runs two shards side by side).
set -euo pipefail
BIN="$1"
SHARD="${2:-1/1}"
K="${SHARD%/*}" N="${SHARD#*/}"
mine() { [ $(( ($1 - 1) % N )) -eq $((K - 1)) ]; }  # is case number $1 this shard's?
PY=/usr/bin/python3
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

common=(--set model.n_layers=4 --set model.d_model=32 --set model.n_heads=2 --set model.d_ff=64
        --set model.ctx=32 --set train.batch_size=8 --set train.steps=25 --set optim.warmup=5
        --set optim.lr=3e-3 --set eval.max_windows=8 --set train.checkpoint_every=100
        --set eval.every=0 --set train.threads=1)
cases=()
for layout in pre post deepnorm sandwich normformer reordered mix; do
  for norm in layernorm rmsnorm; do cases+=("$layout $norm"); done
done
for norm in rmsnorm_1p scalenorm batchnorm dyt none; do cases+=("pre $norm"); done
cases+=("sandwich batchnorm" "post scalenorm" "deepnorm dyt")
cases+=("pre rmsnorm --set model.qk_norm=true --set model.pos=rope --set model.ffn=swiglu")
cases+=("pre layernorm --set model.qk_norm=true --set model.qk_norm_type=rmsnorm_1p --set model.embed_norm=true --set model.norm.bias=false")
cases+=("pre layernorm --set model.bias=true --set model.tie_embeddings=false --set model.attn_softcap=2 --set model.logit_softcap=5")
cases+=("normformer rmsnorm --set model.normformer.resid_scale=all --set model.ffn=swiglu")
cases+=("normformer layernorm --set model.normformer.resid_scale=ffn --set model.pos=rope")
cases+=("deepnorm layernorm --set model.deepnorm.alpha=1 --set model.deepnorm.beta=1")
cases+=("mix rmsnorm --set model.mix.post_layers=3 --set model.qk_norm=true")
cases+=("pre layernorm --set model.norm.eps=0.01 --set init.scheme=xavier")
# rmsnorm_free (issue 15's first new norm): the main stream, a layout with many slots, QK-norm
cases+=("pre rmsnorm_free" "sandwich rmsnorm_free --set model.norm.eps=0.001")
cases+=("pre layernorm --set model.qk_norm=true --set model.qk_norm_type=rmsnorm_free --set model.pos=rope")
# ssnorm (Single-Scale RMSNorm): the main stream, a layout with many slots, QK-norm
cases+=("pre ssnorm" "sandwich ssnorm" "pre layernorm --set model.qk_norm=true --set model.qk_norm_type=ssnorm")
# The 2025 methods (issue 15): derf, subln, hybrid, lns, layerscale, qk_norm_axis/position,
# v_norm, attn_gate, subln.gamma; init-time options too, since checkpoints record their effect.
source "$(dirname "$0")/cases_2025.sh"
cases+=("${cases_2025[@]}")
# The residual-stream methods: hc, mhc, attnres, value residual, ngpt, resi_dual.
source "$(dirname "$0")/cases_residual.sh"
cases+=("${cases_residual[@]}")
cases+=("subln rmsnorm --set optim.qk_clip=5 --set optim.lr=3e-2")

fail=0
i=0
ran=0
for c in "${cases[@]}"; do
  i=$((i + 1))
  mine $i || continue
  ran=$((ran + 1))
  read -r layout norm extra <<<"$c"
  # "--perturb" (not a normlab flag): after training, scripts/reference_model.py perturb adds
  # seeded noise to every parameter, so weights that training leaves near init move too
  perturb=""
  if [[ " $extra " == *" --perturb "* ]]; then perturb=1; extra="${extra/--perturb/}"; fi
  run="$tmp/run$i"
  # shellcheck disable=SC2086
  if ! "$BIN" train -c configs/default.yaml --out "$run" --set model.layout="$layout" \
      --set model.norm.type="$norm" "${common[@]}" $extra 2>"$tmp/log$i"; then
    echo "FAIL [$c]: training failed"; tail -3 "$tmp/log$i"; fail=1; continue
  fi
  if [ -n "$perturb" ] && ! $PY scripts/reference_model.py perturb --run "$run" >/dev/null; then
    echo "FAIL [$c]: perturbing the checkpoint failed"; fail=1; continue
  fi
  ours="$("$BIN" eval --run "$run")"
  ref="$($PY scripts/reference_model.py eval --run "$run")"
  if ! $PY - "$ours" "$ref" <<'PYEOF'
import json, sys
a, b = json.loads(sys.argv[1]), json.loads(sys.argv[2])
rel = abs(a["loss"] - b["loss"]) / abs(b["loss"])
ok = rel <= 1e-4 and a["windows"] == b["windows"] and a["tokens"] == b["tokens"]
print(f'  loss normlab {a["loss"]:.6f} reference {b["loss"]:.6f} rel {rel:.1e}')
sys.exit(0 if ok else 1)
PYEOF
  then echo "FAIL [$c]: eval differs: $ours vs $ref"; fail=1; continue; fi
  s_ours="$("$BIN" sample --run "$run" --prompt 'k: a=12 b=' --max-new 24 --temperature 0)"
  s_ref="$($PY scripts/reference_model.py sample --run "$run" --prompt 'k: a=12 b=' --max-new 24)"
  if [ "$s_ours" != "$s_ref" ]; then
    echo "FAIL [$c]: greedy samples differ: '$s_ours' vs '$s_ref'"; fail=1; continue
  fi
  echo "ok [$c]"
done
if [ $fail -eq 0 ]; then echo "reference check (shard $SHARD): all $ran of the ${#cases[@]} combinations this shard runs agree"; fi

# The residual-stream statistics of the train records (layers.act_rms, act_max, act_kurtosis,
# block_cos; src/metrics/README.md) against the reference's forward over the same micro-batch,
# from the initial weights (step 0's record and step_00000000), to 1e-4 relative.
stream_cases=("pre layernorm" "post rmsnorm" "deepnorm layernorm" "pre ssnorm" "hybrid rmsnorm --set model.pos=rope")
for c in "${stream_cases[@]}"; do
  i=$((i + 1))
  mine $i || continue
  read -r layout norm extra <<<"$c"
  run="$tmp/run$i"
  # shellcheck disable=SC2086
  if ! "$BIN" train -c configs/default.yaml --out "$run" --set model.layout="$layout" --set model.norm.type="$norm" \
      "${common[@]}" --set train.steps=2 --set data.shuffle=false --set train.save_init=true --set diag.every=1 \
      $extra 2>"$tmp/log$i"; then
    echo "FAIL stream [$c]: training failed"; tail -3 "$tmp/log$i"; fail=1; continue
  fi
  ref="$($PY scripts/reference_model.py stream --run "$run" --step 0)"
  if ! $PY - "$run/metrics.jsonl" "$ref" <<'PYEOF'
import json, sys
rec = next(r for r in map(json.loads, open(sys.argv[1])) if r["kind"] == "train" and r["step"] == 0)
ref = json.loads(sys.argv[2])
worst = {}
for key, want in ref.items():
    got = rec["layers"][key]
    assert len(got) == len(want), (key, len(got), len(want))
    worst[key] = max(abs(g - w) / max(abs(w), 1e-12) for g, w in zip(got, want))
print("  stream max rel: " + ", ".join(f"{k} {v:.1e}" for k, v in worst.items()))
sys.exit(0 if max(worst.values()) <= 1e-4 else 1)
PYEOF
  then echo "FAIL stream [$c]: statistics differ"; fail=1; continue; fi
  echo "ok stream [$c]"
done
exit $fail
