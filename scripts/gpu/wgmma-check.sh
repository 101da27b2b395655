#!/usr/bin/env bash
# One part of a device call (issue 23): the Hopper attention forward (src/ops/cuda/attention_wg*, wgmma + TMA)
# on one H200, in the order docs/decisions/attention-wgmma.md gives. Each diagnostic runs in its own process,
# so a kernel that traps (every mbarrier wait traps after ~4 s of spinning) costs only its own row:
#   1. WindowOneCopiesValues (P V, V's descriptor, the store), OneHotValuesShowScores (S = Q K^T, the mask),
#      BiasOnlyShowsTheBand (the band and its TMA boxes): each prints the first mismatching (t, h, j);
#   2. CudaAttentionWg/* (every head-dim-128 case of the attention tests, both forms, against the CPU);
#   3. the comparison with the mma.sync forward on the slice's shapes, the refusal of other head dims;
#   4. the setmaxnreg form alone (the form that may hang);
#   5. attention_bench with its wgmma rows (time and largest difference from the default forward);
#   6. with QUILL_ATTENTION_WGMMA=1 (every head-dim-128 forward through it) the attention op tests.
# Here first: cmake --build build -j2 && scripts/gpu-bundle.sh build build/gpu-bundle cuda_tests attention_bench
# Then: run(carry=["build/gpu-bundle"], command="bash scripts/gpu/wgmma-check.sh")  (about 2-3 minutes)
# Environment [defaults]: OUT [/tmp/out]
set -uo pipefail
ONE_PREFIX=wg-
source "$(dirname "$0")/gtest-one.sh"  # also OUT, B, LD_LIBRARY_PATH and T
{
echo "quill $(cat "$B/COMMIT"); $(date -u +%FT%TZ)"
one window-one 'CudaAttentionWg.WindowOneCopiesValues' 60
one one-hot 'CudaAttentionWg.OneHotValuesShowScores' 60
one bias-only 'CudaAttentionWg.BiasOnlyShowsTheBand' 60
one cases 'CudaAttentionWg/*' 150
one vs-mma 'CudaAttentionWg.MatchesTensorCoreForwardOnSliceShapes:CudaAttentionWg.RejectsOtherHeadDims' 90
one setmaxnreg 'CudaAttentionWg.SetmaxnregFormMatchesCpu' 60
date +%T; timeout 120 "$B/bin/attention_bench" > "$OUT/wg-attention-bench.txt" 2>&1; echo "attention_bench rc $?"
cat "$OUT/wg-attention-bench.txt"
one routed 'CudaAttention*:*CudaAttentionTest*:-CudaAttentionWg*' 150 QUILL_ATTENTION_WGMMA=1
date +%T
} 2>&1 | tee "$OUT/wgmma-check.txt"
