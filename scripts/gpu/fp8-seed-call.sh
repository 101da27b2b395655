#!/usr/bin/env bash
# One device call (issue 43, must-show 3): the seed's three stage kinds under --simulate-rank (TP4 SP PP4
# 12/10/10/10 EP8 DP2, bf16 moments, balanced routing) in bf16 and in FP8 (FP8 [--fp8-format e4m3 --fp8-recipe
# blockwise], e.g. with --no-fp8-wgrad) from the same build: ms per micro-batch, peak, and
# `quill project --global-batch 128` of each arm.
# The same memory settings in both arms: CASES [first-bf16s middle-bf16s last-bf16s: bf16 moments, no offload,
# selective recompute; quill plan: FP8 stage 0 133.92 GiB as bf16; *-bf16fu under 100 GB]. Offload 0.1 (*-bf16o)
# planned FP8's stage 0 at
# 139.55 GiB and ran out of memory on the H200 at the second step (2026-12-06). 16 rows per step (8
# micro-batches), 3 steps, step 0 warm-up.
#   here:   scripts/gpu-bundle.sh build build/gpu-bundle cuda_tests quill && git rev-parse --short HEAD > build/gpu-bundle/COMMIT
#   device: run(carry=["build/gpu-bundle"], command="bash scripts/gpu/fp8-seed-call.sh")
# Back: $OUT/fp8-seed.txt and $OUT/fp8-seed.tar.gz (each case's summary, collectives, metrics, projection, log).
set -uo pipefail
# shellcheck source=scripts/gpu/bundle-env.sh
source "$(dirname "$0")/bundle-env.sh"  # OUT, B, Q and the bundle's libraries (quill project needs them too)
R=/tmp/fp8-seed
# On a GPU under 100 GB: the whole optimizer state offloaded and every layer recomputed in both arms (*-bf16fu: FP8's
# stage 0 planned at 65.2 GiB; with offload 0.7, 83.9; quill plan, 2026-12-07).
gpu_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -1)
small="first-bf16fu middle-bf16fu last-bf16fu"
CASES=${CASES:-$([ "${gpu_mib:-0}" -lt 100000 ] && echo "$small" || echo "first-bf16s middle-bf16s last-bf16s")}
mkdir -p "$OUT" "$R"
{
for arm in bf16 fp8; do
  extra=""; [ $arm = fp8 ] && extra=${FP8:-"--fp8-format e4m3 --fp8-recipe blockwise"}
  echo "=== $arm"
  # shellcheck disable=SC2086
  TRAIN_EXTRA="$extra" OUT=$R/$arm GLOBAL_BATCH=16 STEPS=${STEPS:-3} WARMUP=1 CASE_TIMEOUT=${CASE_TIMEOUT:-170} \
    bash scripts/gpu/seed-projection.sh $CASES 2>&1 | grep -E "^rank|train rc|error|refused|^fits" | grep -v "^host node"
  dirs=()
  for c in $CASES; do [ -f "$R/$arm/$c/summary.json" ] && dirs+=("$R/$arm/$c"); done
  ((${#dirs[@]})) && "$Q" project --global-batch 128 "${dirs[@]}" 2>&1 | tee "$R/$arm/project.txt" | head -20
done
tar -czf "$OUT/fp8-seed.tar.gz" -C "$R" . 2>/dev/null
} 2>&1 | tee "$OUT/fp8-seed.txt"
