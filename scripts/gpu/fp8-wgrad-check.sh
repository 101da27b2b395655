#!/usr/bin/env bash
# One device call (issue 43): why FP8 under --no-fp8-wgrad trained the slice on an H100 with gradient norms of 1e6
# (bf16: 1.8; 2026-12-07, 3ddd30d). 1. cuda_tests CudaFp8Gradients.* (each gradient against bf16's, with and without
# FP8 weight gradients and recompute); 2. quill train of tests/fixtures/configs/fp8-wide.json with random weights on
# the GPU, bf16, FP8 and FP8 --no-fp8-wgrad, with and without every layer recomputed: the gradient norms of 3 steps.
#   device: run(carry=["build/gpu-bundle.tgz"], command="tar -xzf build/gpu-bundle.tgz -C build && bash scripts/gpu/fp8-wgrad-check.sh")
# Back: $OUT/fp8-wgrad.txt
set -uo pipefail
# shellcheck source=scripts/gpu/bundle-env.sh
source "$(dirname "$0")/bundle-env.sh"
W=/tmp/fp8-wgrad
mkdir -p "$OUT" "$W"
{
nvidia-smi --query-gpu=name --format=csv,noheader
echo "quill $(cat "$B/COMMIT"); $(date -u +%FT%TZ)"
RECOMPUTE="--recompute-granularity full --recompute-method uniform --recompute-num-layers 1"
if [ "${SMALL:-1}" = 1 ]; then  # SMALL=0: the slice's shapes only
timeout 120 "$B/bin/cuda_tests" --gtest_filter='CudaFp8Gradients.*' > "$W/cuda_tests.log" 2>&1
echo "cuda_tests rc $?"; grep -E "^\[  (PASSED|FAILED)|FAILED  \]|relative L2|Failure" "$W/cuda_tests.log" | head -40
timeout 60 "$Q" data synth --conversations 200 --row-tokens 512 --seed 42 --out "$W/rows" > /dev/null 2>&1
for rc in none full; do
  for arm in bf16 fp8 fp8-nowgrad; do
    extra=()
    [ $arm != bf16 ] && extra=(--fp8-format e4m3 --fp8-recipe blockwise)
    [ $arm = fp8-nowgrad ] && extra+=(--no-fp8-wgrad)
    [ $rc = full ] && read -ra more <<< "$RECOMPUTE" && extra+=("${more[@]}")
    timeout 60 "$Q" train --config tests/fixtures/configs/fp8-wide.json --seed 1234 --rows "$W/rows" \
      --device "$DEVICE" --overwrite --out "$W/$arm-$rc" --steps 3 --global-batch 1 --lr 1e-3 "${extra[@]}" > "$W/$arm-$rc.log" 2>&1
    echo "$arm recompute $rc: rc $? $(python3 -c "
import json, sys
print(' '.join(f\"{d['loss']:.4f}/{d['grad_norm']:.4g}\" for d in map(json.loads, open(sys.argv[1]))))" \
      "$W/$arm-$rc/metrics.jsonl" 2>&1)"
  done
done
fi
# 3. The slice's shapes (8,192-token rows, one per step, 2 steps): the slice itself with the 80 GB memory flags (FP8
# weight gradients on and off), then its first two layers (a dense and an MoE one) without them, the three arms.
timeout 60 "$Q" data synth --conversations 2000 --row-tokens 8192 --max-rows 16 --seed 42 --out "$W/rows8k" \
  > /dev/null 2>&1
python3 -c "
import json
c = json.load(open('configs/slice.json'))
c.update(num_hidden_layers=2, layer_types=c['layer_types'][-2:], mlp_layer_types=c['mlp_layer_types'][:2])
json.dump(c, open('$W/slice2.json', 'w'), indent=1)"
MEM="--exp-avg-dtype bf16 --exp-avg-sq-dtype bf16 --use-precision-aware-optimizer $RECOMPUTE"
# RUNS: "config arm mem [flags, comma-separated]" entries separated by ';'.
RUNS=${RUNS:-slice fp8 mem;slice fp8-nowgrad mem;slice2 bf16 -;slice2 fp8 -;slice2 fp8-nowgrad -;slice2 fp8-nowgrad mem}
if [ -n "${TESTS_FILTER:-}" ]; then
  timeout 200 "$B/bin/cuda_tests" --gtest_filter="$TESTS_FILTER" > "$W/filter.log" 2>&1
  echo "cuda_tests $TESTS_FILTER: rc $?"
  grep -E "^\[  (PASSED|FAILED)|FAILED  \]" "$W/filter.log"
fi
IFS=';' read -ra runs <<< "$RUNS"
n=0
for run in "${runs[@]}"; do
  read -r config arm mem flags <<< "$run"
  n=$((n + 1))
  extra=()
  [ -n "${flags:-}" ] && IFS=',' read -ra extra <<< "$flags"
  [ "$arm" != bf16 ] && extra+=(--fp8-format e4m3 --fp8-recipe blockwise)
  [ "$arm" = fp8-nowgrad ] && extra+=(--no-fp8-wgrad)
  [ "$mem" = mem ] && read -ra more <<< "$MEM" && extra+=("${more[@]}")
  path=configs/slice.json; [ "$config" = slice2 ] && path=$W/slice2.json
  timeout 90 "$Q" train --config "$path" --seed 1234 --rows "$W/rows8k" --device "$DEVICE" --overwrite \
    --out "$W/$n-$config-$arm-$mem" --steps 2 --global-batch 1 --lr 1e-5 "${extra[@]}" \
    > "$W/$n-$config-$arm-$mem.log" 2>&1
  echo "$config $arm memory flags $mem ${flags:-}: rc $? $(python3 -c "
import json, sys
print(' '.join(f\"{d['loss']:.4f}/{d['grad_norm']:.4g}\" for d in map(json.loads, open(sys.argv[1]))))" \
    "$W/$n-$config-$arm-$mem/metrics.jsonl" 2>&1)"
  grep -iE "error|refus" "$W/$n-$config-$arm-$mem.log" | head -2
done
} 2>&1 | tee "$OUT/fp8-wgrad.txt"
