#!/usr/bin/env bash
# Optimizer memory on one H200 (issue 19): the slice (configs/slice.json, 8,192-token rows, one row
# per step) trained for a few steps with the optimizer state all on the device, offloaded at
# F = 0.3, 0.7 and 1 (Megatron's --optimizer-cpu-offload --optimizer-offload-fraction F, with and
# without --overlap-cpu-optimizer-d2h-h2d), and with bf16 moments (--exp-avg-dtype bf16
# --exp-avg-sq-dtype bf16); per run its median step time, peak device memory (the allocator's, per
# step), the bytes of optimizer state on the device and in pinned host memory, and the losses
# against the all-device run. Then the host AdamW's GB/s of optimizer state (fp32 and bf16
# moments) against the host's memcpy bandwidth (bench/cpu_adamw), and the CUDA optimizer tests.
#
# Here first:
#   cmake --build build -j2 && scripts/gpu-bundle.sh build build/gpu-bundle cuda_tests cpu_adamw_bench
# Then (each call at most 10 minutes; RUNS picks the runs of this call, default all of them):
#   run(carry=["build/gpu-bundle"], command="bash scripts/gpu/offload-check.sh")
#   run(carry=["build/gpu-bundle"], command="RUNS='f0 f0.7o b16' bash scripts/gpu/offload-check.sh")
# Runs: f0 (all device), f0.3, f0.3o, f0.7, f0.7o, f1, f1o (o: with overlap), b16 (bf16 moments, all
# device), b16-f0.7o (both). Writes $OUT/offload-check.txt, $OUT/offload-check.json and each run's
# summary.json as $OUT/NAME-summary.json.
# Environment [defaults]: OUT [/tmp/out]  STEPS [4]  RUNS [all]  TESTS [1]  BENCH [1]
set -uo pipefail
OUT=${OUT:-/tmp/out}
STEPS=${STEPS:-4}
RUNS=${RUNS:-"f0 f0.3 f0.3o f0.7 f0.7o f1 f1o b16 b16-f0.7o"}
B=$PWD/build/gpu-bundle
export LD_LIBRARY_PATH=$B/lib:${LD_LIBRARY_PATH:-} NCCL_NVLS_ENABLE=0
Q=$B/bin/quill
WORK=/tmp/offload-work
mkdir -p "$OUT" "$WORK"
T0=$(date +%s)
{
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
echo "quill $(cat "$B/COMMIT" 2>/dev/null); $(date -u +%FT%TZ); host: $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB"
if [ "${TESTS:-1}" = 1 ]; then
  timeout 120 "$B/bin/cuda_tests" --gtest_filter='CudaAdamW*:CudaOptimizerOffload*' 2>&1 | tail -n 4
fi
if [ "${BENCH:-1}" = 1 ] && [ -x "$B/bin/cpu_adamw_bench" ]; then
  echo "== host AdamW (bench/cpu_adamw), 128 Mi elements"
  timeout 150 "$B/bin/cpu_adamw_bench" $((1 << 27)) 2>&1 | tee "$WORK/cpu_adamw.txt"
fi
[ -f "$WORK/rows/manifest.json" ] || "$Q" data synth --conversations 600 --row-tokens 8192 --max-rows 16 \
  --out "$WORK/rows" > /dev/null
flags=(train --config configs/slice.json --seed 1234 --rows "$WORK/rows" --steps "$STEPS" --global-batch 1 --lr 1e-5
       --min-lr 1e-6 --warmup-fraction 0 --device cuda --quiet --overwrite --warmup-steps 1)
for name in $RUNS; do
  # NAME or NAME:K (a repeat, kept as NAME-rK: alternate the runs, A B B A, to tell a flag's effect from the host's
  # drift within a call).
  run=${name%%:*}
  [[ $name == *:* ]] && name="$run-r${name#*:}"
  extra=()
  case $run in
    f0) ;;
    f0.3) extra=(--optimizer-cpu-offload --optimizer-offload-fraction 0.3) ;;
    f0.3o) extra=(--optimizer-cpu-offload --optimizer-offload-fraction 0.3 --overlap-cpu-optimizer-d2h-h2d) ;;
    f0.7) extra=(--optimizer-cpu-offload --optimizer-offload-fraction 0.7) ;;
    f0.7o) extra=(--optimizer-cpu-offload --optimizer-offload-fraction 0.7 --overlap-cpu-optimizer-d2h-h2d) ;;
    f1) extra=(--optimizer-cpu-offload --optimizer-offload-fraction 1) ;;
    f1o) extra=(--optimizer-cpu-offload --optimizer-offload-fraction 1 --overlap-cpu-optimizer-d2h-h2d) ;;
    b16) extra=(--exp-avg-dtype bf16 --exp-avg-sq-dtype bf16) ;;
    b16-f0.7o) extra=(--exp-avg-dtype bf16 --exp-avg-sq-dtype bf16 --optimizer-cpu-offload --optimizer-offload-fraction 0.7
                      --overlap-cpu-optimizer-d2h-h2d) ;;
    *) echo "unknown run $run"; continue ;;
  esac
  s=$(date +%s)
  timeout 280 "$Q" "${flags[@]}" "${extra[@]}" --out "$WORK/$name" > "$WORK/$name.log" 2>&1
  echo "run $name: rc $? in $(( $(date +%s) - s )) s (call at +$(( $(date +%s) - T0 )) s): ${extra[*]}"
  grep -E "optimizer offload|start-up|error|refused" "$WORK/$name.log" | head -n 4
  cp "$WORK/$name/summary.json" "$OUT/$name-summary.json" 2>/dev/null
done
python3 - "$WORK" "$RUNS" "$OUT" <<'PY'
import json, sys, os
work, out = sys.argv[1], sys.argv[3]
runs = [r.replace(":", "-r") if ":" in r else r for r in sys.argv[2].split()]
def load(run):
    try:
        s = json.load(open(f"{work}/{run}/summary.json"))
        m = [json.loads(l) for l in open(f"{work}/{run}/metrics.jsonl")]
        return s, m
    except Exception:
        return None, None
ref_name = "f0" if "f0" in runs else runs[0]  # without an all-device run, the first run is the reference
ref_s, ref_m = load(ref_name)
table = []
print(f"{'run':10s} {'median step s':>13s} {'peak GiB':>9s} {'state dev GiB':>13s} {'state host GiB':>14s} {'max rel loss vs ' + ref_name:>18s}")
for run in runs:
    s, m = load(run)
    if s is None:
        print(f"{run:10s} (no result)"); continue
    st = s["optimizer_state_bytes_rank0"]
    dev, host = st.get("device", 0), st.get("host", 0)
    rel = None
    if ref_m and run != ref_name:
        rel = max(abs(a["loss"] - b["loss"]) / abs(b["loss"]) for a, b in zip(m, ref_m))
    row = {"run": run, "median_step_s": s.get("median_step_s"), "peak_gpu_bytes": s.get("peak_gpu_bytes"),
           "state": st, "reference": ref_name, "max_rel_loss_vs_reference": rel, "losses": [x["loss"] for x in m]}
    table.append(row)
    print(f"{run:10s} {s.get('median_step_s', 0):13.3f} {s.get('peak_gpu_bytes', 0) / 2**30:9.2f} "
          f"{dev / 2**30:13.2f} {host / 2**30:14.2f} {('%.2e' % rel) if rel is not None else '-':>18s}")
    # Where each step's time went: the passes, and of the rest the offload's waits and host update (host clock).
    for p in s.get("per_step", []):
        print(f"    step {p['step']}: {p['step_time_s']:.3f} s = passes {p['passes_time_s']:.3f} + rest "
              f"{p['step_time_s'] - p['passes_time_s']:.3f} (offload: wait down {p.get('offload_wait_down_s', 0):.3f}, "
              f"host {p.get('offload_host_s', 0):.3f}, wait up {p.get('offload_wait_up_s', 0):.3f})")
json.dump(table, open(out + "/offload-check.json", "w"), indent=1)
PY
} 2>&1 | tee "$OUT/offload-check.txt"
