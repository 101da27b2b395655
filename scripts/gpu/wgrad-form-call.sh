#!/usr/bin/env bash
# One device call (issue 40): an experimental form of the experts' weight-gradient kernel against the others.
#   1. cuda_tests GroupedWgradWgmma.* (every form against the CPU, an experiment against its parent form's bits) and
#      the CUDA loopback mover's spans;
#   2. grouped_bench --no-fp8 at 32 experts x 384 rows (a seed rank's micro-batch) and x 768 (the pairs): the weight
#      gradient's arms;
#   3. with ATTENTION_HEADS (e.g. "8:2 32:8"), attention_bench --heads for each (the attention ops' times);
#   4. with STAGES=1, seed-stages-call.sh (the three stages at the GPU's memory settings).
# TESTS replaces the cuda_tests filter (default: the weight-gradient kernel's and the loopback mover's tests).
# WGRAD_ROWS: the rows per expert grouped_bench runs (default "384 768").
#   here:   scripts/gpu-bundle.sh build build/gpu-bundle cuda_tests quill grouped_bench
#   device: run(carry=["build/gpu-bundle.tgz"], command="tar -xzf build/gpu-bundle.tgz -C build && bash scripts/gpu/wgrad-form-call.sh")
# Back: $OUT/wgrad-form.txt (tests' summary and the bench arms), tests.log, and with STAGES=1 what
# seed-stages-call.sh brings back.
set -uo pipefail
dir=$(dirname "$0")
# shellcheck source=scripts/gpu/bundle-env.sh
source "$dir/bundle-env.sh"
mkdir -p "$OUT"
{
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
echo "quill $(cat "$B/COMMIT" 2>/dev/null); $(date -u +%FT%TZ)"
timeout "${TESTS_TIMEOUT:-260}" "$B/bin/cuda_tests" --gtest_filter="${TESTS:-GroupedWgradWgmma.*:CudaLoopbackMover.*}" > "$OUT/tests.log" 2>&1
echo "cuda_tests rc $?"
grep -E "^\[  (PASSED|FAILED)|Failure|rel L2" "$OUT/tests.log" | head -40
for rows in ${WGRAD_ROWS:-384 768}; do
  echo "== grouped_bench --no-fp8, 32 experts x $rows rows"
  read -ra counts <<< "$(printf "$rows %.0s" $(seq 32))"
  timeout 60 "$B/bin/grouped_bench" --no-fp8 "${counts[@]}" 2>&1 | grep -E "^backward weight|against cuBLASLt"
done
for heads in ${ATTENTION_HEADS:-}; do
  for bin in attention_bench-before attention_bench; do  # a before build, when the bundle holds one
    [ -x "$B/bin/$bin" ] || continue
    echo "== $bin --heads $heads"
    timeout 90 "$B/bin/$bin" --heads "$heads" 2>&1 | grep -vE "^$"
  done
done
} 2>&1 | tee "$OUT/wgrad-form.txt"
[ "${STAGES:-0}" = 1 ] || exit 0
CASE_TIMEOUT=${CASE_TIMEOUT:-120} timeout 420 bash "$dir/seed-stages-call.sh"
echo "seed-stages rc $?"
