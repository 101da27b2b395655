#!/usr/bin/env bash
# One device call (issue 19, part 3): `quill plan` against the peak the CUDA allocator measures
# (metrics.jsonl / summary.json peak_gpu_bytes: the most bytes live at once during a step) on one H200:
#   - the slice (configs/slice.json, 8,192-token rows), 1 and 8 rows per step (one process);
#   - PP2 of configs/slice6-e8.json, 4,096-token rows, 4 micro-batches, two processes sharing the GPU
#     (each rank's own allocator: summary.json peak_device_bytes_per_rank against its stage's plan);
#   - the slice at 8 rows with FP8, and with selective recompute (moe_act layernorm).
# Also the plan's device total (allocator peak + workspace + context + slack + NCCL, modelled) against
# cudaMemGetInfo's used bytes at the end of the run. Prints the table; writes $OUT/plan-check.txt and
# $OUT/plan-check.json. The issue's bar: predicted peak within 10% of the measured one.
# Here first: cmake --build build -j2 && scripts/gpu-bundle.sh build build/gpu-bundle cuda_tests
# Then: run(carry=["build/gpu-bundle"], command="bash scripts/gpu/plan-check.sh")
set -uo pipefail
OUT=${OUT:-/tmp/out}
B=$PWD/build/gpu-bundle
export LD_LIBRARY_PATH=$B/lib:${LD_LIBRARY_PATH:-} NCCL_NVLS_ENABLE=0
Q=$B/bin/quill
STEPS=${STEPS:-3}
W=/tmp/plan-check
mkdir -p "$OUT" "$W"
{
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
echo "quill $(cat "$B/COMMIT" 2>/dev/null || echo unknown); $(date -u +%FT%TZ)"
"$Q" data synth --overwrite --conversations 6000 --row-tokens 8192 --max-rows 64 --out $W/rows8192 > /dev/null
"$Q" data synth --overwrite --conversations 3000 --row-tokens 4096 --max-rows 64 --out $W/rows4096 > /dev/null
run_case() {  # NAME RANKS CONFIG ROWS GLOBAL_BATCH LAYOUT...
  local name=$1 ranks=$2 config=$3 rows=$4 gb=$5
  shift 5
  local flags=(--config "$config" --rows "$rows" --global-batch "$gb" "$@")
  local launch=()
  (( ranks > 1 )) && launch=(mpirun --allow-run-as-root --oversubscribe -np "$ranks")
  timeout 300 "${launch[@]}" "$Q" train "${flags[@]}" --seed 1 --steps "$STEPS" --lr 1e-4 --device cuda --quiet \
    --overwrite --out "$W/$name" < /dev/null > "$W/$name.log" 2>&1
  echo "$name: train rc $?"; grep -E "memory plan|error" "$W/$name.log" | head -3
  "$Q" plan --device cuda --json "${flags[@]}" > "$W/$name.plan.json" 2> "$W/$name.plan.err"
  echo "$name: plan rc $?"
}
run_case slice-gb1 1 configs/slice.json $W/rows8192 1
run_case slice-gb8 1 configs/slice.json $W/rows8192 8
run_case slice6-pp2 2 configs/slice6-e8.json $W/rows4096 4 --pp 2 --pp-layers 3,3
# The memory paths of 2026-12-06: FP8 (the bf16 copies only in the optimizer phase) and selective recompute.
run_case slice-gb8-fp8 1 configs/slice.json $W/rows8192 8 --fp8-format e4m3 --fp8-recipe blockwise
run_case slice-gb8-sel 1 configs/slice.json $W/rows8192 8 --recompute-granularity selective --recompute-modules moe_act layernorm
python3 - "$W" "$OUT/plan-check.json" <<'PY'
import json, sys
w, out = sys.argv[1], sys.argv[2]
gib = lambda b: b / 2**30
rows, worst = [], 0.0
print(f"{'case':<12} {'rank':>4} {'stage':>5} {'predicted GiB':>14} {'measured GiB':>13} {'diff':>8}   {'plan total':>10} {'device used':>11}")
for name in ("slice-gb1", "slice-gb8", "slice6-pp2", "slice-gb8-fp8", "slice-gb8-sel"):
    try:
        plan = json.load(open(f"{w}/{name}.plan.json"))
        summ = json.load(open(f"{w}/{name}/summary.json"))
    except Exception as e:
        print(f"{name}: no result ({e})"); continue
    peaks = summ.get("peak_device_bytes_per_rank") or [summ["peak_gpu_bytes"]]
    for rank, measured in enumerate(peaks):
        stage = rank if len(plan["stages"]) > 1 else 0
        s = plan["stages"][stage]
        pred = s["allocator_peak_bytes"]
        d = (pred - measured) / measured
        worst = max(worst, abs(d))
        used = summ.get("device_used_bytes_end", -1)
        print(f"{name:<12} {rank:>4} {stage:>5} {gib(pred):>14.3f} {gib(measured):>13.3f} {100*d:>+7.2f}%   "
              f"{gib(s['device_total_bytes']):>10.2f} {gib(used) if used > 0 else float('nan'):>11.2f}")
        rows.append({"case": name, "rank": rank, "stage": stage, "predicted_peak_bytes": pred, "measured_peak_bytes": measured,
                     "relative_difference": d, "plan_device_total_bytes": s["device_total_bytes"],
                     "device_used_bytes_end": used})
print(f"largest |difference|: {100*worst:.2f}% ({'within' if worst <= 0.10 else 'OUTSIDE'} the issue's 10%)")
json.dump({"rows": rows, "largest_relative_difference": worst}, open(out, "w"), indent=1)
PY
} 2>&1 | tee "$OUT/plan-check.txt"
