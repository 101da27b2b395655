#!/usr/bin/env bash
# One device call (issue 43): the FP8 GEMMs on the GPU (src/ops/cuda/fp8_gemm.cc, fp8_quantize.cu).
#   1. tests   cuda_tests Fp8Cuda.*, CudaFp8TransientCompute.* (against the CPU reference, quantisation bit for bit) and the bf16/fp32 GEMM
#              tests (the cuBLASLt core they share, lt_matmul.cc); stop there if one fails
#   2. ceiling bench/slice/ceilings.py: bf16 and FP8 (e4m3, per-tensor scales) 8192^3 GEMMs, the copy
#   3. slice   the slice's release-format init and rows (as bench/slice/run.sh makes them), then for bf16 and FP8:
#              gb1 for CONV_STEPS steps (the convergence pair, and gb1's speed) and gb8 for GB8_STEPS steps
#              (per-op profile of the last warm-up step); `quill check convergence` FP8 against bf16 at gb1
#   here:   scripts/gpu-bundle.sh build build/gpu-bundle cuda_tests quill && git rev-parse --short HEAD > build/gpu-bundle/COMMIT
#   device: run(carry=["build/gpu-bundle"], command="bash scripts/gpu/fp8-call.sh")
# Environment [defaults]: CONV_STEPS [50]  GB8_STEPS [8]  WARMUP [3]  TESTS [1]  MEM_FLAGS [none on an H200; on a
#   GPU under 100 GB bf16 moments and full recompute of every layer, in both arms: the slice needs 92.5 GiB in bf16 and
#   98.0 with FP8's weight copies, and 67.1 / 72.6 GiB so (quill plan, 2026-12-06)]
# Back: $OUT/fp8.txt (the call's log), cuda_tests.log, fp8-slice.tar.gz (summaries, metrics, profiles, logs).
set -uo pipefail
OUT=${OUT:-/tmp/out}
B=$PWD/build/gpu-bundle
Q=$B/bin/quill
W=/tmp/fp8-work
export LD_LIBRARY_PATH=$B/lib:${LD_LIBRARY_PATH:-} NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
CONV_STEPS=${CONV_STEPS:-50}
GB8_STEPS=${GB8_STEPS:-8}
WARMUP=${WARMUP:-3}
FP8="--fp8-format e4m3 --fp8-recipe blockwise"
MEM=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
if [ -z "${MEM_FLAGS+x}" ]; then
  MEM_FLAGS=""
  [ "${MEM:-0}" -lt 100000 ] && MEM_FLAGS="--exp-avg-dtype bf16 --exp-avg-sq-dtype bf16 --use-precision-aware-optimizer --recompute-granularity full --recompute-method uniform --recompute-num-layers 1"
fi
mkdir -p "$OUT" "$W"
{
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
echo "memory flags (both arms): ${MEM_FLAGS:-none}"
echo "quill $(cat "$B/COMMIT"); $(date -u +%FT%TZ)"
if [ "${TESTS:-1}" = 1 ]; then
  timeout 200 "$B/bin/cuda_tests" --gtest_filter='Fp8Cuda.*:CudaFp8TransientCompute.*:LinearCuda.*:GroupedLinearCuda.*' > "$OUT/cuda_tests.log" 2>&1
  rc=$?
  echo "cuda_tests rc $rc"
  grep -E "^\[  (PASSED|FAILED)|FAILED  \]|SKIPPED \]|fp8|Failure|Expected|Which is|error" "$OUT/cuda_tests.log" | head -60
  if [ $rc -ne 0 ]; then echo "tests failed: no slice runs"; exit 1; fi
fi
date +%T
timeout 90 python3 bench/slice/ceilings.py "$W/ceilings.json" 2>&1 | tail -n 2
read -r c_mm c_cp c_f8 < <(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(d['matmul_tflops'], d['copy_gbps'], d.get('fp8_matmul_tflops') or 2 * d['matmul_tflops'])" "$W/ceilings.json" 2>/dev/null || echo "794 4240 1588")
timeout 200 python3 tools/parity/make_init.py --config configs/slice.json --seed 1234 --out "$W/init" > "$W/init.log" 2>&1
tail -n 1 "$W/init.log"
timeout 60 "$Q" data synth --conversations 14000 --row-tokens 8192 --seed 42 --out "$W/rows" > "$W/rows.log" 2>&1
tail -n 1 "$W/rows.log"
common=(--init "$W/init" --rows "$W/rows" --device cuda --overwrite --lr 1e-5 --min-lr 1e-5 --lr-decay-style constant
        --clip-grad 1.0 --warmup-steps "$WARMUP" --profile-ceilings "$c_mm" "$c_cp" "$c_f8")
report() {  # run dir
  python3 - "$1" <<'PY'
import json, sys
d = sys.argv[1]
try:
    s = json.load(open(f"{d}/summary.json"))
except OSError:
    print(f"  {d}: no summary"); sys.exit(0)
print(f"  {d.split('/')[-1]}: {s.get('tokens_per_s', 0):.0f} tokens/s, MFU {100 * s.get('mfu', 0):.2f}%, "
      f"median step {s.get('median_step_s', 0) * 1e3:.1f} ms, peak {s.get('peak_device_bytes', 0) / 2**30:.1f} GiB, "
      f"fp8 {s.get('fp8')}, final loss {s.get('final_loss', s.get('loss'))}")
PY
}
for arm in bf16 fp8; do
  extra=""; [ $arm = fp8 ] && extra=$FP8
  date +%T
  # shellcheck disable=SC2086
  timeout 150 "$Q" train "${common[@]}" $MEM_FLAGS $extra --steps "$CONV_STEPS" --global-batch 1 --out "$W/$arm-gb1" \
    > "$W/$arm-gb1.log" 2>&1
  echo "$arm gb1 rc $?"; grep -E "error|Error" "$W/$arm-gb1.log" | head -3; report "$W/$arm-gb1"
  # shellcheck disable=SC2086
  timeout 150 "$Q" train "${common[@]}" $MEM_FLAGS $extra --steps "$GB8_STEPS" --global-batch 8 --profile-step $((WARMUP - 1)) \
    --out "$W/$arm-gb8" > "$W/$arm-gb8.log" 2>&1
  echo "$arm gb8 rc $?"; grep -E "error|Error" "$W/$arm-gb8.log" | head -3; report "$W/$arm-gb8"
  grep -A40 "^by op:" "$W/$arm-gb8"/op_profile_step*.txt 2>/dev/null | head -32
done
"$Q" check convergence --candidate "$W/fp8-gb1/metrics.jsonl" --reference "$W/bf16-gb1/metrics.jsonl" 2>&1 | tail -n 12
date +%T
tar -C "$W" -czf "$OUT/fp8-slice.tar.gz" --exclude='init/model.safetensors' --exclude='rows/rows.bin' \
  ceilings.json init.log rows.log bf16-gb1 bf16-gb8 fp8-gb1 fp8-gb8 bf16-gb1.log bf16-gb8.log fp8-gb1.log fp8-gb8.log 2>/dev/null
} 2>&1 | tee "$OUT/fp8.txt"
