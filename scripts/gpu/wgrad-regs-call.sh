#!/usr/bin/env bash
# One device call (issue 40): the experts' weight-gradient form with the old gradient through registers
# (grouped_wgrad::Form::kN128Regs, an experiment) against the staged forms, then the seed's three stages.
#   1. cuda_tests: GroupedWgradWgmma.* (the new form against the CPU and the 128-wide form's bits), the CUDA
#      loopback mover's spans, the short convolution's halo form;
#   2. grouped_bench --no-fp8 at 32 experts x 384 rows (a seed rank's micro-batch) and x 768 (the pairs): the weight
#      gradient's arms;
#   3. seed-stages-call.sh (the three stages at the GPU's memory settings, their compute now without the loopback's
#      copies).
#   here:   scripts/gpu-bundle.sh build build/gpu-bundle cuda_tests quill grouped_bench
#   device: run(carry=["build/gpu-bundle.tgz"], command="tar -xzf build/gpu-bundle.tgz -C build && bash scripts/gpu/wgrad-regs-call.sh")
# Back: $OUT/wgrad-regs.txt (tests' summary and the bench arms), tests.log, and what seed-stages-call.sh brings back.
set -uo pipefail
dir=$(dirname "$0")
# shellcheck source=scripts/gpu/bundle-env.sh
source "$dir/bundle-env.sh"
mkdir -p "$OUT"
{
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
echo "quill $(cat "$B/COMMIT" 2>/dev/null); $(date -u +%FT%TZ)"
timeout 150 "$B/bin/cuda_tests" --gtest_filter='GroupedWgradWgmma.*:CudaLoopbackMover.*:*CudaShortConvHalo*' \
  > "$OUT/tests.log" 2>&1
echo "cuda_tests rc $?"
grep -E "^\[  (PASSED|FAILED)|Failure|rel L2" "$OUT/tests.log" | head -40
for rows in 384 768; do
  echo "== grouped_bench --no-fp8, 32 experts x $rows rows"
  read -ra counts <<< "$(printf "$rows %.0s" $(seq 32))"
  timeout 60 "$B/bin/grouped_bench" --no-fp8 "${counts[@]}" 2>&1 | grep -E "^backward weight|against cuBLASLt"
done
} 2>&1 | tee "$OUT/wgrad-regs.txt"
CASE_TIMEOUT=${CASE_TIMEOUT:-120} timeout 420 bash "$dir/seed-stages-call.sh"
echo "seed-stages rc $?"
