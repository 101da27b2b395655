#!/usr/bin/env bash
# Nsight Compute on the tensor-core attention kernels (issue 4): where the forward and backward kernels
# of bench/attention/attention_bench spend their cycles (the first launch of each: the local layer; then
# the global layer's backward), with the warp stall reasons per issued instruction.
# Bundle as scripts/gpu/perf-check.sh says; run(carry=["build-cuda/gpu-bundle"], command="bash scripts/gpu/ncu-attention.sh").
set -uo pipefail
B=${BUNDLE:-build-cuda/gpu-bundle}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/$B/lib:${LD_LIBRARY_PATH:-}
NCU=${NCU:-/usr/local/cuda/bin/ncu}
cat "$B/COMMIT" 2>/dev/null
stalls=""
for r in barrier long_scoreboard short_scoreboard mio_throttle math_pipe_throttle wait not_selected selected lg_throttle dispatch_stall no_instruction membar branch_resolving tex_throttle drain sleeping; do
  stalls="$stalls,smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio"
done
metrics="sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,smsp__inst_executed.sum,sm__warps_active.avg.pct_of_peak_sustained_active,gpu__time_duration.sum${stalls}"
# attention_bench launches each kernel 13 times per layer (3 warm-up, 10 timed): launch 0 is the local
# layer's, launch 13 the global layer's. LAYERS="local global" (default), SASS=1 adds the per-instruction
# source page (gzip'd CSV for tools/ncu/sass_mix.py).
# WG=1 (issue 23) profiles the Hopper forward instead (attention_wg_forward_kernel, default form, and its
# bias_band_kernel): attention_bench runs each of its three forms once unmeasured and 13 times measured, so
# launch 0 is the local layer's, launch 42 the global layer's; ncu's own sections (SpeedOfLight,
# ComputeWorkloadAnalysis for the tensor pipe, WarpStateStats, MemoryWorkloadAnalysis, Occupancy, LaunchStats),
# which name Hopper's pipes correctly.
if [ "${WG:-0}" = 1 ]; then
  for kern in attention_wg_forward_kernel bias_band_kernel; do
    for layer in ${LAYERS:-local global}; do
      skip=0; [ "$layer" = global ] && skip=42
      timeout 150 "$NCU" -k "regex:$kern" --launch-skip $skip -c 1 --section SpeedOfLight --section ComputeWorkloadAnalysis \
        --section WarpStateStats --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
        "$B/bin/attention_bench" > "$OUT/ncu-$kern-$layer.txt" 2>&1
      echo "== $kern, $layer layer: ncu rc $?"
      grep -E "Duration|Throughput|Pipe|Tensor|Registers Per|Shared Memory Config|Achieved Occupancy|Stall|Warp Cycles|Issued|ERR" \
        "$OUT/ncu-$kern-$layer.txt" | head -40
    done
  done
  exit 0
fi
for k in ${KERNELS:-forward backward}; do
  for layer in ${LAYERS:-local global}; do
    skip=0; [ "$layer" = global ] && skip=13
    timeout 120 "$NCU" -k "regex:attention_tc_${k}_kernel" --launch-skip $skip -c 1 --metrics "$metrics" --section Occupancy --section SpeedOfLight \
      "$B/bin/attention_bench" > "$OUT/ncu-$k-$layer.txt" 2>&1
    echo "== $k, $layer layer: ncu rc $?"
    grep -E "Duration|Throughput|Registers Per|Achieved Occupancy|stalled|hmma|lsu|shared|inst_executed|warps_active|ERR" "$OUT/ncu-$k-$layer.txt" | sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' | awk '$NF+0 >= 0.1 || !/inst/ {$1=$1; print}' | head -40
    if [ "${SASS:-0}" = 1 ]; then
      timeout 150 "$NCU" -k "regex:attention_tc_${k}_kernel" --launch-skip $skip -c 1 --section SourceCounters --page source --print-source sass --csv \
        "$B/bin/attention_bench" 2>/dev/null | gzip > "$OUT/sass-$k-$layer.csv.gz"
    fi
  done
done
