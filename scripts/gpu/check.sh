#!/usr/bin/env bash
# One call on the GPU machine: every CUDA op test, then the tiny model trained on the GPU (bf16)
# and on the CPU reference (fp32) from the same seed and rows, losses side by side.
# Expects the bundle from scripts/gpu-bundle.sh in .gpu/ (carried) and writes logs under $OUT.
set -uo pipefail
export LD_LIBRARY_PATH=$PWD/.gpu/lib:${LD_LIBRARY_PATH:-} NCCL_NVLS_ENABLE=0
B=$PWD/.gpu/bin
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
"$B/cuda_tests" --gtest_brief=1 > "$OUT/cuda_tests.log" 2>&1
echo "cuda_tests exit $?"; grep -E "PASSED|FAILED|Failure" "$OUT/cuda_tests.log" | head -40

rows=/tmp/quill-rows
"$B/quill" data synth --overwrite --conversations 2000 --row-tokens 128 --out "$rows" > /dev/null
flags="train --config configs/tiny.json --rows $rows --seed 1 --steps 60 --global-batch 4 --lr 1e-2 --min-lr 1e-3
       --warmup-fraction 0.05 --beta2 0.95 --weight-decay 0.1 --quiet"
"$B/quill" $flags --out /tmp/run-cpu > /tmp/train-cpu.log 2>&1 || { echo "cpu train failed"; tail /tmp/train-cpu.log; }
"$B/quill" $flags --device cuda --out /tmp/run-gpu > /tmp/train-gpu.log 2>&1 || { echo "gpu train failed"; tail /tmp/train-gpu.log; }
cp /tmp/run-gpu/metrics.jsonl "$OUT/tiny-gpu.jsonl" 2>/dev/null
python3 - <<'PY'
import json
def load(p):
    try: return [json.loads(l) for l in open(p)]
    except Exception as e: return []
c, g = load('/tmp/run-cpu/metrics.jsonl'), load('/tmp/run-gpu/metrics.jsonl')
print('step  cpu-fp32  gpu-bf16  rel-diff  gpu-step-ms')
worst = 0
for a, b in zip(c, g):
    d = abs(a['loss'] - b['loss']) / abs(a['loss']); worst = max(worst, d)
    if a['step'] % 10 == 0 or a['step'] == len(c) - 1:
        print(f"{a['step']:4d}  {a['loss']:.5f}  {b['loss']:.5f}  {d:.2e}  {1000*b['step_time_s']:.1f}")
print(f"max rel loss diff over {min(len(c), len(g))} steps: {worst:.3e}")
PY
