#!/usr/bin/env bash
# One device call (issues 23, 42): the Hopper attention forward and backward (src/ops/cuda/attention_wg_*.cu)
# on one H200. Each step in its own process, so a kernel that traps (every
# mbarrier wait traps after ~4 s; a named barrier does not, the step's timeout ends it) costs
# only its own row:
#   0. the forward's diagnostics and cases;
#   1. one small case (no bias, one tile), then every case against the CPU (tests/cuda/attention_wg_backward_test.cc);
#   2. the same bits on two runs, the comparison with the mma.sync backward on the slice's shapes;
#   3. attention_bench (forward and backward rows, the wgmma ones with their largest differences);
#   4. the attention op tests (the ops' routing: wgmma for global layers, mma.sync for local ones).
# Here first: cmake --build build -j2 && scripts/gpu-bundle.sh build build/gpu-bundle cuda_tests attention_bench
# Then: run(carry=["build/gpu-bundle"], command="bash scripts/gpu/wgmma-bwd-check.sh")
#   5. (KERNELS=1) every kernel's time in one attention_bench run under ncu (gpu__time_duration), summed per
#      kernel name: what the backward's extra kernels (band, bias rows, dq finish) cost beside the main one.
#   6. (STALLS=1) ncu on the global layer's wgmma backward kernel: tensor-pipe use, issue slots and the warp
#      stall reasons per issued instruction (what the kernel waits on; the first version was issue-bound at 30%).
# Environment [defaults]: OUT [/tmp/out], BENCH [1]: 0 skips attention_bench, KERNELS [0], HEADS [32:8]: the
# attention_bench head counts, e.g. "32:8 8:2" (the slice, one TP4 rank of the seed's layout).
set -uo pipefail
ONE_PREFIX=wgb-
source "$(dirname "$0")/gtest-one.sh"  # also OUT, B, LD_LIBRARY_PATH and T
{
echo "quill $(cat "$B/COMMIT"); $(date -u +%FT%TZ)"
one forward 'CudaAttentionWg.*:CudaAttentionWg/*' 200
one small 'CudaAttentionWgBackward/CudaAttentionWgBackwardTest.MatchesCpu/T64_one_tile_no_bias' 60
one cases 'CudaAttentionWgBackward/*' 200
one bits-vs-mma 'CudaAttentionWgBackward.*' 150
if [ "${BENCH:-1}" = 1 ]; then
  for heads in ${HEADS:-32:8}; do
    tag=${heads/:/-}
    date +%T; timeout 150 "$B/bin/attention_bench" --heads $heads > "$OUT/wgb-attention-bench-$tag.txt" 2>&1
    echo "attention_bench rc $? --heads $heads"
    cat "$OUT/wgb-attention-bench-$tag.txt"
  done
fi
one ops-default 'CudaAttention.*:CudaAttention/*' 150
if [ "${KERNELS:-0}" = 1 ]; then
  timeout 240 /usr/local/cuda/bin/ncu --metrics gpu__time_duration.sum --csv "$B/bin/attention_bench" --no-wgmma-forward \
    > "$OUT/wgb-kernels.csv" 2>/dev/null
  echo "ncu rc $?; per kernel: launches, total ms (both layers, every timed and warm-up call)"
  python3 - "$OUT/wgb-kernels.csv" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
head = rows[0]; ki = head.index("Kernel Name"); vi = head.index("Metric Value"); ui = head.index("Metric Unit")
tot = collections.defaultdict(float); n = collections.Counter()
for r in rows[1:]:
    v = float(r[vi].replace(",", "")); u = r[ui]
    v = v / 1e6 if u in ("nsecond", "ns") else (v / 1e3 if u in ("usecond", "us") else (v * 1e3 if u in ("second", "s") else v))
    name = r[ki].split("(")[0][-60:]; tot[name] += v; n[name] += 1
for k, v in sorted(tot.items(), key=lambda x: -x[1]): print(f"{n[k]:5d} {v:10.3f}  {k}")
PY
fi
if [ "${STALLS:-0}" = 1 ]; then
  stalls=""
  for r in barrier long_scoreboard short_scoreboard mio_throttle math_pipe_throttle wait not_selected selected lg_throttle \
           dispatch_stall no_instruction membar branch_resolving drain sleeping; do
    stalls="$stalls,smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio"
  done
  # attention_bench --no-wgmma-forward launches the wgmma backward 14 times per layer (one checked call, 3 warm-up,
  # 10 timed): launch 15 is the global layer's first warm-up call.
  timeout 200 /usr/local/cuda/bin/ncu -k regex:attention_wg_backward_kernel --launch-skip 15 -c 1 \
    --metrics "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed.avg.per_cycle_active,smsp__inst_executed.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum$stalls" \
    "$B/bin/attention_bench" --no-wgmma-forward > "$OUT/wgb-stalls.txt" 2>&1
  echo "ncu stalls rc $?"
  grep -E "gmma|per_cycle|inst_executed|wavefronts|duration|stalled" "$OUT/wgb-stalls.txt" | sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' | head -30
fi
date +%T
} 2>&1 | tee "$OUT/wgmma-bwd-check.txt"
