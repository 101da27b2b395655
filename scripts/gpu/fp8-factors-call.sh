#!/usr/bin/env bash
# One device call (issue 43): the FP8 experts' kernel's two forms of the row factors (CudaBackendOptions::
# fp8_factors_in_stage, experimental: from global memory, the default since 990ebf6, or through the stage, read before
# the MMA as DeepGEMM does) on correctness and speed, so that the loser can be deleted.
#   1. grouped_bench twice (its default counts: a measured step of the slice): the FP8 arms, cuBLASLt and both forms
#   2. cuda_tests written on 2026-12-07 and not yet run: GroupedGemmWgmma.* (the FP8 slice-shaped test runs both forms
#      three times against cuBLASLt's bits; the bf16 seed-shaped one at 32 experts, no element far from cuBLASLt's),
#      Fp8Cuda.* (the weights' vector quantiser bit for bit, bf16 and fp32), CudaAttentionWg.MatchesTensorCore* (no
#      element far from mma.sync's at the slice's shapes), CudaStackedProjections.* (the FP8 projections stacked
#      against four GEMMs), CudaDeterminism.* and CudaFp8Gradients.* (with the stacked projections), ColumnsCuda.*
#      (the copy kernel of any unit)
#   here:   scripts/gpu-bundle.sh build build/gpu-bundle cuda_tests quill grouped_bench
#   device: run(carry=["build/gpu-bundle.tgz"], command="tar -xzf build/gpu-bundle.tgz -C build && bash scripts/gpu/fp8-factors-call.sh")
# Back: $OUT/fp8-factors.txt, $OUT/tests.log
set -uo pipefail
# shellcheck source=scripts/gpu/bundle-env.sh
source "$(dirname "$0")/bundle-env.sh"
mkdir -p "$OUT"
{
nvidia-smi --query-gpu=name --format=csv,noheader
echo "quill $(cat "$B/COMMIT" 2>/dev/null); $(date -u +%FT%TZ)"
for r in 1 2; do
  echo "== grouped_bench, pass $r"
  timeout 90 "$B/bin/grouped_bench" 2>&1 | grep -E "^fp8"
done
filter='GroupedGemmWgmma.*:Fp8Cuda.*:CudaAttentionWg.MatchesTensorCoreForwardOnSliceShapes'
filter+=':CudaStackedProjections.*:CudaDeterminism.*:CudaFp8Gradients.*:ColumnsCuda.*'
timeout 400 "$B/bin/cuda_tests" --gtest_filter="$filter" > "$OUT/tests.log" 2>&1
echo "cuda_tests rc $?"
grep -E "slice-shaped|seed-shaped|FAILED|PASSED|Failure" "$OUT/tests.log"
} 2>&1 | tee "$OUT/fp8-factors.txt"
