#!/usr/bin/env bash
# One device call (issue 42): after the attention routing was chosen (wgmma kernels for global layers, mma.sync
# for local ones, bias rows as GEMMs): every CUDA op test, attention_bench at the slice's 32:8 heads and a TP4
# rank's 8:2, then the slice's parity run against transformers (tools/parity/run_parity.sh: 2 x 4,096-token rows,
# 20 steps; the strict and convergence figures in slice-compare.txt).
# Here first: cmake --build build -j2 && scripts/gpu-bundle.sh build build/gpu-bundle cuda_tests attention_bench
#             && git rev-parse --short HEAD > build/gpu-bundle/COMMIT
# Then: run(carry=["build/gpu-bundle"], command="bash scripts/gpu/attention-routing-check.sh")  (about 6-7 minutes)
# Environment [defaults]: OUT [/tmp/out]  PARITY [1]  PARITY_S [330]
set -uo pipefail
B=$PWD/build/gpu-bundle
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$B/lib:${LD_LIBRARY_PATH:-} NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
{
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
echo "quill $(cat "$B/COMMIT"); $(date -u +%FT%TZ)"
date +%T; timeout 240 "$B/bin/cuda_tests" --gtest_brief=1 > "$OUT/cuda_tests.log" 2>&1
echo "cuda_tests rc $?"; grep -E "^\[  (PASSED|FAILED)|FAILED  \]|tests ran|SKIPPED \]" "$OUT/cuda_tests.log" | head -30
for heads in 32:8 8:2; do
  date +%T; timeout 120 "$B/bin/attention_bench" --heads $heads 2>&1 | tee "$OUT/attention-bench-${heads/:/-}.txt"
done
if [ "${PARITY:-1}" = 1 ]; then
  date +%T; echo "== parity: slice, 2 x 4,096-token rows, 20 steps, against transformers"
  QUILL=$B/bin/quill OUT="$OUT" REF_REPEAT=0 timeout "${PARITY_S:-330}" bash tools/parity/run_parity.sh configs/slice.json \
    /tmp/rows4096 4096 2 > "$OUT/parity.log" 2>&1
  echo "parity rc $?"
  grep -E "convergence|strict|max rel|correlation|PASS|FAIL|worst" "$OUT/slice-compare.txt" 2>/dev/null | head -12 || tail -20 "$OUT/parity.log"
fi
date +%T
} 2>&1 | tee "$OUT/attention-routing-check.txt"
