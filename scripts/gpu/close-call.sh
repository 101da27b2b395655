#!/usr/bin/env bash
# One device call for what session 33 has left to measure (issues 40 and 43's follow-ups), shortest first:
#   1. fp8-close-call.sh with SLICE=0: the FP8 and weight-gradient kernels' tests and grouped_bench arms, the stacked
#      FP8 projections' test, the short convolution's halo form (tests); about 90 s. (Its first run measured the FP8
#      kernel's overlapped promotion and the weight gradient's L2 prefetch, both deleted since.)
#   2. seed-stages-call.sh: the seed's three stage kinds, profiled, and their projection (H200: bf16 moments, no
#      offload; 80 GB: every layer recomputed with the state offloaded); about 6 minutes.
#   here:   scripts/gpu-bundle.sh build build/gpu-bundle cuda_tests quill grouped_bench
#   device: run(carry=["build/gpu-bundle.tgz"], command="tar -xzf build/gpu-bundle.tgz -C build && bash scripts/gpu/close-call.sh")
# Back: what the two scripts bring back ($OUT/fp8-close.txt, tests.log, seed-stages.txt, project.txt, one folder per case).
set -uo pipefail
dir=$(dirname "$0")
SLICE=0 timeout 150 bash "$dir/fp8-close-call.sh"
echo "fp8-close rc $?"
CASE_TIMEOUT=${CASE_TIMEOUT:-135} timeout 440 bash "$dir/seed-stages-call.sh"
echo "seed-stages rc $?"
