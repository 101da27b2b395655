#!/usr/bin/env bash
# One device call (issue 17): expert parallelism on ONE H200, several processes sharing the GPU
# (device tensors, bf16 rows in the dispatcher's all-to-alls, staged through host memory over MPI,
# --comm auto), against one process on the same slice-shaped config (configs/slice6-e8.json: the
# slice's dimensions, 6 layers, 8 experts), 4,096-token rows, 1 row per step, 5 steps. One row per
# step means no data parallelism, so the expert-parallel ranks are carved from tensor-parallel ones:
# EP2 = --tp 2 --sp --ep 2 (4 experts per process), EP4 = --tp 4 --sp --ep 4 (2 per process).
# Prints the per-step losses side by side with the step times, and the dispatcher's rows (ep.counts,
# ep.dispatch, ep.combine: bytes moved) of EP2's per-op profile of step 3; writes $OUT/ep-check.txt.
#
# Processes sharing one GPU are time-sliced: expect ~30 s per step with 4 of them (their step times
# say nothing about EP's speed), so the timeouts below are generous (T1/T2/T4 seconds per run). If a
# 600 s call does not hold all three, split it: PARTS="one ep2", then PARTS="one ep4".
# Here first: cmake --build build -j2 && scripts/gpu-bundle.sh build build/gpu-bundle cuda_tests
# Then: run(carry=["build/gpu-bundle"], command="bash scripts/gpu/ep-check.sh")
# Environment: CONFIG [configs/slice6-e8.json] (configs/slice.json: the slice itself, 32 experts)  ROW_TOKENS [4096]
#   PARTS [one ep2 ep4]  T1 T2 T4 (seconds per run)
#   PARTS may add "noise": the one-process run twice more with the attention backward's dQ additions in arrival
#   order (--attention-dq-order arrival): two runs that differ only in the order of float sums,
#   i.e. the bf16 noise floor of this very config, rows and steps, against which EP's difference is read.
set -uo pipefail
OUT=${OUT:-/tmp/out}
B=$PWD/build/gpu-bundle
export LD_LIBRARY_PATH=$B/lib:${LD_LIBRARY_PATH:-} NCCL_NVLS_ENABLE=0
Q=$B/bin/quill
PARTS=${PARTS:-one ep2 ep4}
mkdir -p "$OUT"
MPI=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
has() { [[ " $PARTS " == *" $1 "* ]]; }
{
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
echo "quill $(cat "$B/COMMIT"); $(date -u +%FT%TZ); parts: $PARTS"
"$Q" data synth --overwrite --conversations 3000 --row-tokens ${ROW_TOKENS:-4096} --out /tmp/rows-ep > /dev/null
flags=(train --config ${CONFIG:-configs/slice6-e8.json} --rows /tmp/rows-ep --seed 1 --steps 5 --global-batch 1 --lr 1e-4
       --min-lr 1e-5 --warmup-fraction 0 --clip-grad 1.0 --device cuda --overwrite)
if has one; then
  date +%T; timeout ${T1:-120} "$Q" "${flags[@]}" --out /tmp/ep-one > /tmp/ep-one.log 2>&1; echo "one process rc $?"
  tail -2 /tmp/ep-one.log
fi
if has ep2; then
  date +%T; timeout ${T2:-200} "${MPI[@]}" -np 2 "$Q" "${flags[@]}" --tp 2 --sp --ep 2 --profile-step 3 --out /tmp/ep-2 \
    < /dev/null > /tmp/ep-2.log 2>&1; echo "ep2 (tp2+sp) rc $?"; tail -4 /tmp/ep-2.log
fi
if has ep4; then
  date +%T; timeout ${T4:-260} "${MPI[@]}" -np 4 "$Q" "${flags[@]}" --tp 4 --sp --ep 4 --out /tmp/ep-4 \
    < /dev/null > /tmp/ep-4.log 2>&1; echo "ep4 (tp4+sp) rc $?"; tail -4 /tmp/ep-4.log
fi
if has noise; then
  for k in a b; do
    date +%T; timeout ${T1:-120} "$Q" "${flags[@]}" --attention-dq-order arrival --out /tmp/ep-noise-$k > /tmp/ep-noise-$k.log 2>&1
    echo "one process, unordered dQ ($k) rc $?"
  done
  echo "--- the noise floor: two one-process runs whose float sums differ in order only"
  python3 tools/runs/compare_runs.py /tmp/ep-noise-a /tmp/ep-noise-b
fi
for d in ep-one ep-2 ep-4 ep-noise-a ep-noise-b; do [ -f /tmp/$d/metrics.jsonl ] && mkdir -p "$OUT/$d" && cp /tmp/$d/metrics.jsonl "$OUT/$d/"; done
python3 tools/runs/compare_runs.py /tmp/ep-one /tmp/ep-2 /tmp/ep-4
cp /tmp/ep-2/op_profile_step3.* "$OUT/" 2>/dev/null
grep -E "ep\.|moe_|copy|^ *op" /tmp/ep-2/op_profile_step3.txt 2>/dev/null | head -30
} 2>&1 | tee "$OUT/ep-check.txt"
