#!/usr/bin/env bash
# One device call (issues 40, 42) for the seed rank's ops changed on 2026-12-06, on whichever one-GPU machine comes:
#   1. the GPU tests of what changed: the experts' weight-gradient kernel in both forms (GroupedWgradWgmma.*), the
#      router gate's chunks added by the GEMMs (RouterGateCuda.*), the Hopper attention backward with one query head
#      per CTA (*CudaAttentionWgBackward*), the grouped GEMMs and the determinism test; stop if one fails;
#   2. grouped_bench at 32 experts x 384 and x 768 rows: the weight gradient's 256- and 128-wide forms against
#      cuBLASLt (docs/decisions/grouped-wgrad.md: the loser is deleted);
#   3. attention_bench at a TP4 rank's 8 q / 2 kv heads and the slice's 32 / 8: the backward per kv head and per
#      query head (ops/attention_head_split.h);
#   4. STAGE=1 (default): the seed's last stage with --moe-expert-wgrad-micro-batches 2 off and on (A B): the pairs'
#      weight gradients read in place by the kernel (no merge pass), the per-op profile of both arms.
#   here:   scripts/gpu-bundle.sh build build/gpu-bundle cuda_tests grouped_bench quill attention_bench
#   device: run(carry=["build/gpu-bundle.tgz"], command="tar -xzf build/gpu-bundle.tgz -C build && bash scripts/gpu/seed-ops-call.sh")
# Back: $OUT/seed-ops.txt (the call's log), cuda_tests.log, grouped-bench-{384,768}.txt, attention-bench-*.txt,
# $OUT/pairs.{txt,tar.gz}.
set -uo pipefail
# shellcheck source=scripts/gpu/bundle-env.sh
source "$(dirname "$0")/bundle-env.sh"
mkdir -p "$OUT"
{
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
echo "quill $(cat "$B/COMMIT"); $(date -u +%FT%TZ)"
timeout 200 "$B/bin/cuda_tests" --gtest_filter='GroupedWgradWgmma.*:RouterGateCuda.*:*CudaAttentionWgBackward*:GroupedGemmWgmma.*:GroupedLinearCuda.*:CudaOrderedSum.*:*CudaRouter*:CudaDeterminism.TheSameTrainingTwiceGivesTheSameBits' \
  > "$OUT/cuda_tests.log" 2>&1
rc=$?
echo "cuda_tests rc $rc"
grep -E "^\[  (PASSED|FAILED)|FAILED  \]|tests ran|rel L2|relative L2" "$OUT/cuda_tests.log" | head -30
if [ $rc -ne 0 ]; then echo "tests failed: no timing"; exit 1; fi
date -u +%T
for rows in 384 768; do
  read -ra counts <<< "$(printf "$rows %.0s" $(seq 32))"
  timeout 100 "$B/bin/grouped_bench" "${counts[@]}" > "$OUT/grouped-bench-$rows.txt" 2>&1
  echo "-- 32 experts x $rows rows"; grep -E "^(backward weight|gate)" "$OUT/grouped-bench-$rows.txt"
done
date -u +%T
for heads in 8:2 32:8; do
  timeout 120 "$B/bin/attention_bench" --heads "$heads" --no-wgmma-forward > "$OUT/attention-bench-${heads/:/-}.txt" 2>&1
  echo "-- attention_bench --heads $heads"; cat "$OUT/attention-bench-${heads/:/-}.txt"
done
date -u +%T
[ "${STAGE:-1}" = 0 ] && exit 0
mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
# On an 80 GB card the pairs' held rows fit the last stage only with every layer recomputed (bf16ru).
if [ "${mib:-0}" -gt 100000 ]; then case=last-bf16s; else case=last-bf16ru; fi
CASES=$case NAME=pairs ARMS="${ARMS:-off on}" ON='--moe-expert-wgrad-micro-batches 2' KEYS=moe_expert_wgrad_micro_batches \
  OPS='grouped_linear_backward_weight|gather_rows_from_pair|attention_backward' CASE_TIMEOUT="${CASE_TIMEOUT:-100}" \
  bash "$(dirname "$0")/stage-ab-call.sh" 2>&1 | tail -30
date -u +%T
} 2>&1 | tee "$OUT/seed-ops.txt"
