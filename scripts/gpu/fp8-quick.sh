#!/usr/bin/env bash
# A short device call (issue 43) for when little device time is left: the FP8 op tests, then the slice with random
# weights (no checkpoint to make) at 8 rows per step, bf16 and FP8 from the same build, GB8_STEPS steps each with the
# per-op profile of the last warm-up step (the FP8 GEMMs rated against twice the bf16 ceiling). The full pass with the
# release-format init, gb1, the convergence pair and the measured FP8 ceiling is scripts/gpu/fp8-call.sh.
#   device: run(carry=["build/gpu-bundle"], command="bash scripts/gpu/fp8-quick.sh")
set -uo pipefail
OUT=${OUT:-/tmp/out}
B=$PWD/build/gpu-bundle
Q=$B/bin/quill
W=/tmp/fp8-quick
export LD_LIBRARY_PATH=$B/lib:${LD_LIBRARY_PATH:-} NCCL_NVLS_ENABLE=0
GB8_STEPS=${GB8_STEPS:-6}
MEM=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
MEM_FLAGS=""
[ "${MEM:-0}" -lt 100000 ] && MEM_FLAGS="--exp-avg-dtype bf16 --exp-avg-sq-dtype bf16 --use-precision-aware-optimizer --recompute-granularity full --recompute-method uniform --recompute-num-layers 1"
mkdir -p "$OUT" "$W"
{
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
echo "quill $(cat "$B/COMMIT"); $(date -u +%FT%TZ); memory flags: ${MEM_FLAGS:-none}"
timeout 60 "$B/bin/cuda_tests" --gtest_filter='Fp8Cuda.*:CudaFp8TransientCompute.*' > "$OUT/cuda_tests.log" 2>&1
echo "cuda_tests rc $?"; grep -E "^\[  (PASSED|FAILED)|FAILED  \]|rel L2" "$OUT/cuda_tests.log" | head -30
timeout 40 "$Q" data synth --conversations 2000 --row-tokens 8192 --max-rows 64 --seed 42 --out "$W/rows" > /dev/null 2>&1
for arm in bf16 fp8; do
  extra=""; [ $arm = fp8 ] && extra="--fp8-format e4m3 --fp8-recipe blockwise"
  # shellcheck disable=SC2086
  timeout 90 "$Q" train --config configs/slice.json --rows "$W/rows" --device cuda --overwrite --seed 3 --lr 1e-5 \
    --steps "$GB8_STEPS" --warmup-steps 2 --global-batch 8 --profile-step 1 $MEM_FLAGS $extra --out "$W/$arm" \
    > "$W/$arm.log" 2>&1
  echo "$arm rc $?"; grep -E "^steps >=|error" "$W/$arm.log" | head -3
  grep -A30 "^by op:" "$W/$arm"/op_profile_step1.txt 2>/dev/null | head -24
done
tar -czf "$OUT/fp8-quick.tar.gz" -C "$W" bf16 fp8 bf16.log fp8.log --exclude='*.safetensors' 2>/dev/null
} 2>&1 | tee "$OUT/fp8-quick.txt"
