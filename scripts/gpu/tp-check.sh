#!/usr/bin/env bash
# One device call (issue 16): tensor + sequence parallelism on ONE H200, several processes sharing the
# GPU (device tensors staged through host memory over MPI, --comm auto), against one process on the
# same slice-shaped config (configs/slice6-e8.json: the slice's dimensions, 6 layers, 8 experts: with
# expert tensor parallelism 1 every process holds all routed experts, and the slice's 32 would not fit
# four times), 4,096-token rows, GB rows per step (default 1), 5 steps. Prints the per-step losses side by side and
# the step times, and the per-op profile of step 3 of TP2+SP (the collectives as rows of their own);
# writes $OUT/tp-check.txt and the profiles.
# Here first: cmake --build build -j2 && scripts/gpu-bundle.sh build build/gpu-bundle cuda_tests
# Then: run(carry=["build/gpu-bundle"], command="bash scripts/gpu/tp-check.sh")
# PARTS [one tp2 tp4] picks the runs of this call (the comparison needs "one").
set -uo pipefail
OUT=${OUT:-/tmp/out}
B=$PWD/build/gpu-bundle
export LD_LIBRARY_PATH=$B/lib:${LD_LIBRARY_PATH:-} NCCL_NVLS_ENABLE=0
Q=$B/bin/quill
PARTS=${PARTS:-one tp2 tp4}
mkdir -p "$OUT"
has() { [[ " $PARTS " == *" $1 "* ]]; }
MPI=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
{
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
echo "quill $(cat "$B/COMMIT"); $(date -u +%FT%TZ)"
if [ -x "$B/bin/cuda_tests" ]; then
  timeout 240 "$B/bin/cuda_tests" --gtest_filter="${TESTS:-CudaVocabParallel*:CudaCrossEntropy*:CudaEmbedding*}" 2>&1 | tail -4
fi
"$Q" data synth --overwrite --conversations 3000 --row-tokens 4096 --out /tmp/rows4096 > /dev/null
flags=(train --config configs/slice6-e8.json --rows /tmp/rows4096 --seed 1 --steps 5 --global-batch ${GB:-1} --lr 1e-4
       --min-lr 1e-5 --warmup-fraction 0 --clip-grad 1.0 --device cuda --overwrite)
if has one; then
  date +%T; timeout ${T1:-150} "$Q" "${flags[@]}" --out /tmp/tp-one > /tmp/tp-one.log 2>&1; echo "one process rc $?"; tail -2 /tmp/tp-one.log
fi
if has tp2; then
  date +%T; timeout ${T2:-260} "${MPI[@]}" -np 2 "$Q" "${flags[@]}" --tp 2 --sp --profile-step 3 --out /tmp/tp-2 \
    < /dev/null > /tmp/tp-2.log 2>&1; echo "tp2+sp rc $?"; tail -4 /tmp/tp-2.log
fi
if has tp4; then
  date +%T; timeout ${T4:-250} "${MPI[@]}" -np 4 "$Q" "${flags[@]}" --tp 4 --sp --out /tmp/tp-4 \
    < /dev/null > /tmp/tp-4.log 2>&1; echo "tp4+sp rc $?"; tail -4 /tmp/tp-4.log
fi
for d in tp-one tp-2 tp-4; do [ -f /tmp/$d/metrics.jsonl ] && mkdir -p "$OUT/$d" && cp /tmp/$d/metrics.jsonl "$OUT/$d/"; done
python3 tools/runs/compare_runs.py /tmp/tp-one /tmp/tp-2 /tmp/tp-4
cp /tmp/tp-2/op_profile_step3.* "$OUT/" 2>/dev/null
grep -E "collective|tp\.|^ *op" /tmp/tp-2/op_profile_step3.txt 2>/dev/null | head -30
} 2>&1 | tee "$OUT/tp-check.txt"
