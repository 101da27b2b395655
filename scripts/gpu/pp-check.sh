#!/usr/bin/env bash
# One device call (issue 18): pipeline parallelism on ONE H200, several processes sharing the GPU
# (device tensors staged through host memory over MPI, --comm auto), against one process on the same
# 6-layer slice-shaped config (configs/slice6-e8.json: the slice's dimensions, layers 0-1 dense, 8
# experts), 4,096-token rows, 4 micro-batches per step, 5 steps. Prints the per-step losses side by
# side and the step times; writes $OUT/pp-check.txt.
# Here first: cmake --build build -j2 && scripts/gpu-bundle.sh build build/gpu-bundle cuda_tests
# Then: run(carry=["build/gpu-bundle"], command="bash scripts/gpu/pp-check.sh")
set -uo pipefail
OUT=${OUT:-/tmp/out}
B=$PWD/build/gpu-bundle
export LD_LIBRARY_PATH=$B/lib:${LD_LIBRARY_PATH:-} NCCL_NVLS_ENABLE=0
Q=$B/bin/quill
mkdir -p "$OUT"
{
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
echo "quill $(cat "$B/COMMIT"); $(date -u +%FT%TZ)"
"$Q" data synth --overwrite --conversations 3000 --row-tokens 4096 --out /tmp/rows4096 > /dev/null
flags=(train --config configs/slice6-e8.json --rows /tmp/rows4096 --seed 1 --steps 5 --global-batch 4 --lr 1e-4
       --min-lr 1e-5 --warmup-fraction 0 --clip-grad 1.0 --device cuda --quiet --overwrite)
timeout 200 "$Q" "${flags[@]}" --out /tmp/pp-one > /tmp/pp-one.log 2>&1; echo "one process rc $?"
timeout 200 mpirun --allow-run-as-root --oversubscribe -np 2 "$Q" "${flags[@]}" --pp 2 --pp-layers 3,3 --out /tmp/pp-2 \
  < /dev/null > /tmp/pp-2.log 2>&1; echo "pp2 rc $?"; tail -2 /tmp/pp-2.log
timeout 240 mpirun --allow-run-as-root --oversubscribe -np 4 "$Q" "${flags[@]}" --pp 4 --pp-layers 2,2,1,1 --out /tmp/pp-4 \
  < /dev/null > /tmp/pp-4.log 2>&1; echo "pp4 rc $?"; tail -2 /tmp/pp-4.log
python3 tools/runs/compare_runs.py /tmp/pp-one /tmp/pp-2 /tmp/pp-4
} 2>&1 | tee "$OUT/pp-check.txt"
