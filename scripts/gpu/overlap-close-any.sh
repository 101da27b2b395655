#!/usr/bin/env bash
# Issue 41's closing measurement on whichever one-GPU machine comes (no H200 could be had for three sessions):
# with QUICK=1 first the quick GPU checks of the ops changed since the last run (the router's gate GEMMs, the ordered sums,
# the router, determinism, the grouped kernels: GroupedWgradWgmma.* is what --grouped-wgrad-kernel auto waits for
# before it becomes the default), then
#   on an H200 (> 100 GB): scripts/gpu/overlap-close-call.sh, the issue's own setting (*-bf16o);
#   on an 80 GB H100 (where the three stage kinds ran on 2026-12-06 with every layer recomputed:
#   bench/results/2026-12-06-h100-overlap-three-stages): the experts' weight-gradient pairs A B on the last stage
#   and Nsight Compute on the attention at a seed rank's shapes.
#   here:   scripts/gpu-bundle.sh build build/gpu-bundle cuda_tests grouped_bench quill
#   device: run(carry=["build/gpu-bundle.tgz"], command="tar -xzf build/gpu-bundle.tgz -C build && bash scripts/gpu/overlap-close-any.sh")
# Back: $OUT/quick.txt, then overlap-close-call.sh's files (H200) or $OUT/pairs/ and $OUT/ncu/ (H100).
set -uo pipefail
O=${OUT:-/tmp/out}
mkdir -p "$O"
source scripts/gpu/bundle-env.sh
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$O/gpu.txt"
echo "quill $(cat "$B/COMMIT"); $(date -u +%FT%TZ)"
[ "${QUICK:-0}" = 1 ] && timeout 150 "$B/bin/cuda_tests" --gtest_filter='RouterGateCuda.*:CudaOrderedSum.*:*CudaRouter*:CudaDeterminism.TheSameTrainingTwiceGivesTheSameBits:GroupedWgradWgmma.*:GroupedGemmWgmma.*' \
  > "$O/quick.txt" 2>&1
[ -f "$O/quick.txt" ] && grep -E '^\[  (PASSED|FAILED) |tests ran|FAILED  \]' "$O/quick.txt" | tail -8
mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
if [ "${mib:-0}" -gt 100000 ]; then
  OUT=$O timeout 440 bash scripts/gpu/overlap-close-call.sh
else
  # The three stage kinds' H100 run is in bench/results/2026-12-06-h100-overlap-three-stages and the ops' tests and
  # benchmarks of seed-ops-call.sh in 2026-12-06-h100-seed-ops: here its stage part alone (the experts' weight-gradient
  # pairs read in place, off and on, on the last stage with every layer recomputed: what fits 80 GB), then Nsight
  # Compute on the attention at a seed rank's shapes (the local layers' backward is what issue 42 works on next).
  CASES=last-bf16ru NAME=pairs ARMS='off on' ON='--moe-expert-wgrad-micro-batches 2' KEYS=moe_expert_wgrad_micro_batches \
    OPS='grouped_linear_backward_weight|gather_rows_from_pair|attention_backward' CASE_TIMEOUT=110 OUT=$O/pairs \
    timeout 300 bash scripts/gpu/stage-ab-call.sh | tail -30
  OUT=$O/ncu timeout 100 bash scripts/gpu/ncu-grouped-seed.sh | tail -60
  OUT=$O/ncu LAUNCHES=120 timeout 170 bash scripts/gpu/ncu-attention-seed.sh | tail -50
fi
date -u +%T
