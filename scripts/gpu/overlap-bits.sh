#!/usr/bin/env bash
# One device call (issues 40, 41): do the performance paths change no bit on the GPU, as they do on CPU ranks?
# Two ranks share the one GPU (MPI-staged, --comm auto) on configs/slice6-e8.json (the slice's dimensions, 6
# layers, 8 experts), 4,096-token rows, 2 rows per step, STEPS [4] steps; each case runs without and with its
# flags, and every step's loss and gradient norm must be the same bits (a GEMM that rounds differently shows in
# the next loss); with SAVE=1 also the final checkpoint's shards (their sha256, from state.json; each arm writes
# ~46 GB at TP2, a minute or more, and its shards are deleted once hashed). First, in one process,
# CudaDeterminism.RecomputeGivesTheSameBits.
#   tp2sp-overlap   --tp 2 --sp, with --tp-comm-overlap (the rings' GEMMs of T/tp rows may pick other cuBLASLt
#                   algorithms than one GEMM of T rows: this is the check the CPU cannot make)
#   tp2sp-select    --tp 2 --sp, with --recompute-granularity selective --recompute-modules moe_act layernorm
#   ep2-overlap     --dp 2 --ep 2, with --moe-shared-expert-overlap --delay-wgrad-compute
#                   --overlap-moe-expert-parallel-comm --overlap-grad-reduce --overlap-param-gather
#   here:   scripts/gpu-bundle.sh build build/gpu-bundle cuda_tests quill && git rev-parse --short HEAD > build/gpu-bundle/COMMIT
#   device: run(carry=["build/gpu-bundle"], command="bash scripts/gpu/overlap-bits.sh")
# CASES picks the cases. Dry run of the command lines on the CPU: Q=build/quill DEVICE=cpu CONFIG=configs/tiny.json
#   ROW_TOKENS=64 bash scripts/gpu/overlap-bits.sh
set -uo pipefail
# shellcheck source=scripts/gpu/bundle-env.sh
source "$(dirname "$0")/bundle-env.sh"
CONFIG=${CONFIG:-configs/slice6-e8.json}
ROW_TOKENS=${ROW_TOKENS:-4096}
CASES=${CASES:-"tp2sp-overlap tp2sp-select ep2-overlap"}
W=/tmp/overlap-bits
MPI=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2)
mkdir -p "$OUT" "$W"
{
[ "$DEVICE" = cuda ] && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
echo "quill $(cat "$B/COMMIT" 2>/dev/null || git rev-parse --short HEAD 2>/dev/null); $(date -u +%FT%TZ)"
# One process first: recompute (selective and full) against none, bit for bit (tests/cuda/determinism_test.cc).
if [ "$DEVICE" = cuda ] && [ -x "$B/bin/cuda_tests" ]; then
  timeout 200 "$B/bin/cuda_tests" --gtest_filter='CudaDeterminism.RecomputeGivesTheSameBits' 2>&1 | grep -E "OK|FAILED|Failure|Expected" | head -8
fi
"$Q" data synth --overwrite --conversations 3000 --row-tokens "$ROW_TOKENS" --max-rows 16 --out "$W/rows" > /dev/null
for c in $CASES; do
  case $c in
    tp2sp-overlap) layout="--tp 2 --sp"; flags="--tp-comm-overlap" ;;
    tp2sp-select) layout="--tp 2 --sp"; flags="--recompute-granularity selective --recompute-modules moe_act layernorm" ;;
    ep2-overlap) layout="--dp 2 --ep 2"
                 flags="--moe-shared-expert-overlap --delay-wgrad-compute --overlap-moe-expert-parallel-comm --overlap-grad-reduce --overlap-param-gather" ;;
    *) echo "unknown case $c"; continue ;;
  esac
  for arm in off on; do
    extra=""; [ $arm = on ] && extra=$flags
    save=(); [ "${SAVE:-0}" = 1 ] && save=(--save "$W/$c-$arm/ck")
    # shellcheck disable=SC2086
    timeout 250 "${MPI[@]}" "$Q" train --config "$CONFIG" --rows "$W/rows" --seed 1 --steps "${STEPS:-4}" --global-batch 2 \
      --lr 1e-4 --device "$DEVICE" --overwrite --quiet $layout $extra --out "$W/$c-$arm" "${save[@]}" \
      < /dev/null > "$W/$c-$arm.log" 2>&1
    echo "$c $arm: rc $?"; grep -E "error" "$W/$c-$arm.log" | head -3
    # The shards' sha256 stay in state.json; the shards go (a slice6-e8 checkpoint with its optimizer state is
    # tens of GB: two filled the 64 GiB disk on 2026-12-06).
    find "$W/$c-$arm/ck" -name '*.safetensors' -delete 2>/dev/null
  done
  python3 - "$W/$c-off" "$W/$c-on" "$c" <<'PY'
import glob, json, os, sys
off, on, name = sys.argv[1:4]
def steps(d):
    return [(m.get("loss"), m.get("grad_norm")) for m in map(json.loads, open(f"{d}/metrics.jsonl"))]
def shards(d):
    out = {}
    for state in sorted(glob.glob(f"{d}/ck/iter_*/state.json")):
        s = json.load(open(state))
        out[os.path.basename(os.path.dirname(state))] = json.dumps(s.get("shards", s.get("files", {})), sort_keys=True)
    return out
try:
    a, b = steps(off), steps(on)
    same_steps = a == b
    ck = "not saved (SAVE=1 compares them)"
    if shards(off) or shards(on):
        ck = "SAME" if shards(off) == shards(on) and bool(shards(off)) else "DIFFER"
    print(f"{name}: steps {'SAME' if same_steps else 'DIFFER'} ({len(a)} steps; off {a[-1]}, on {b[-1]}); "
          f"checkpoint shards {ck}")
except Exception as e:
    print(f"{name}: no result ({e})")
PY
done
} 2>&1 | tee "$OUT/overlap-bits.txt"
