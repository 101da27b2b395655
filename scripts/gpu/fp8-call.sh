#!/usr/bin/env bash
# One device call (issues 43 and 41): the FP8 GEMMs on the GPU against bf16, on whichever one-GPU machine comes.
#   1. tests   cuda_tests Fp8Cuda.*, CudaFp8TransientCompute.* (against the CPU reference, quantisation bit for bit) and
#              the bf16/fp32 GEMM tests (the cuBLASLt core they share, lt_matmul.cc): no FP8 arms if one fails; then
#              (logged only) the attention projections' stacked GEMMs, CudaStackedProjections.*
#   2. ceiling bench/slice/ceilings.py: bf16 and FP8 (e4m3, per-tensor scales) 8192^3 GEMMs, the copy
#   3. per config of CONFIGS (the slice first): its release-format init (tools/parity/make_init.py) and the rows (as
#      bench/slice/run.sh makes them), then bf16 and FP8 at one row per step for CONV_STEPS steps (the convergence
#      pair and gb1's speed), `quill check convergence` FP8 against bf16; for the slice also gb8 for GB8_STEPS steps
#      (per-op profile of the last warm-up step)
#      and, FP8_DENSE_ARM [1], FP8 at gb8 with the dense GEMMs through quill's kernel (--grouped-gemm-kernel wgmma)
#   4. base    (right after the slice) when .gpu-base/bin/quill exists (an older build: issue 41's "the slice unchanged or faster"), the slice
#              in bf16 with it, gb1 and gb8, the same flags, rows and init as this build's bf16 arms
# Each config's memory flags come from `quill plan` of its FP8 arm on this GPU: none when it fits, else (both arms) bf16
# moments and every layer recomputed (the slice on 80 GB: 92.5 GiB in bf16 and 98.0 with FP8 without them).
#   here:   scripts/gpu-bundle.sh build build/gpu-bundle cuda_tests quill && git rev-parse --short HEAD > build/gpu-bundle/COMMIT
#   device: run(carry=["build/gpu-bundle.tgz"], command="tar -xzf build/gpu-bundle.tgz -C build && bash scripts/gpu/fp8-call.sh")
# Environment [defaults]: CONFIGS ["configs/slice.json configs/fp8-second.json"]  CONV_STEPS [50]  GB8_STEPS [8]
#   WARMUP [3]  TESTS [1]  LIMIT [560: seconds; a phase that cannot finish in what is left is skipped]
#   FP8 [the FP8 arms' flags]  FP8_DENSE_ARM [1]  BASE_EARLY [0: 1 runs the base arms right after this build's bf16 arms]  CEILINGS [1]  NO_FP8 [0]  BASE_STEPS [12: the base gb1 arm]  INIT [1]
#   A failed FP8 test drops the FP8 arms only.
# Back (written as it goes): $OUT/fp8.txt (the call's log) and $OUT/fp8-slice.tar.gz (tests, summaries, metrics,
# profiles, logs).
set -uo pipefail
# shellcheck source=scripts/gpu/bundle-env.sh
source "$(dirname "$0")/bundle-env.sh"
BASE=$PWD/.gpu-base
W=/tmp/fp8-work
CONFIGS=${CONFIGS:-configs/slice.json configs/fp8-second.json}
CONV_STEPS=${CONV_STEPS:-50}
GB8_STEPS=${GB8_STEPS:-8}
WARMUP=${WARMUP:-3}
LIMIT=${LIMIT:-560}
FP8=${FP8:-"--fp8-format e4m3 --fp8-recipe blockwise"}  # e.g. add --no-fp8-wgrad
RECOMPUTE="--exp-avg-dtype bf16 --exp-avg-sq-dtype bf16 --use-precision-aware-optimizer --recompute-granularity full
 --recompute-method uniform --recompute-num-layers 1"
rm -rf "$W"
mkdir -p "$OUT" "$W"
left() { echo $((LIMIT - SECONDS)); }
keep() {
  tar -C "$W" -czf "$OUT/fp8-slice.tar.gz" --exclude='model.safetensors' --exclude='rows.bin' --exclude='*.safetensors' \
    --exclude='rows' . 2>/dev/null
}
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
# train NAME QUILL SECONDS FLAGS...: one run into $W/NAME, its log beside it.
train() {
  local name=$1 q=$2 secs=$3
  shift 3
  date -u +%T
  timeout "$secs" "$q" train "$@" --out "$W/$name" > "$W/$name.log" 2>&1
  echo "$name rc $?"
  grep -E "error|Error" "$W/$name.log" | head -3
  report "$W/$name"
  keep
}
# The base build's slice in bf16, gb1 and gb8, the flags, rows and init of this build's bf16 arms (issue 41).
base_arm() {
  [ -x "$BASE/bin/quill" ] && ((${#slice_flags[@]})) && [ "$(left)" -gt 90 ] || return 0
  echo "== base $(cat "$BASE/COMMIT"): the slice in bf16, the same flags"
  LD_LIBRARY_PATH=$BASE/lib:$LD_LIBRARY_PATH train slice-base-gb1 "$BASE/bin/quill" 100 "${slice_flags[@]}" \
    --steps "${BASE_STEPS:-12}" --global-batch 1
  LD_LIBRARY_PATH=$BASE/lib:$LD_LIBRARY_PATH train slice-base-gb8 "$BASE/bin/quill" 120 "${slice_flags[@]}" \
    --steps "$GB8_STEPS" --global-batch 8
  for n in gb1 gb8; do echo "slice $n: base / this build"; report "$W/slice-base-$n"; report "$W/slice-bf16-$n"; done
}
{
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
echo "quill $(cat "$B/COMMIT"); base $(cat "$BASE/COMMIT" 2>/dev/null || echo none); $(date -u +%FT%TZ)"
if [ "${TESTS:-1}" = 1 ]; then
  timeout 200 "$B/bin/cuda_tests" --gtest_filter='Fp8Cuda.*:CudaFp8TransientCompute.*:LinearCuda.*:GroupedLinearCuda.*:GroupedGemmWgmma.Fp8*' \
    > "$W/cuda_tests.log" 2>&1
  rc=$?
  echo "cuda_tests rc $rc"
  grep -E "^\[  (PASSED|FAILED)|FAILED  \]|SKIPPED \]|Failure|Expected|Which is" "$W/cuda_tests.log" | head -40
  keep
  # A failed FP8 test drops the FP8 arms; the bf16 and base arms (issue 41) still run.
  if [ $rc -ne 0 ]; then echo "tests failed: no FP8 arms"; NO_FP8=1; fi
  timeout 60 "$B/bin/cuda_tests" --gtest_filter='CudaStackedProjections.*' > "$W/cuda_tests_stacked.log" 2>&1
  echo "stacked-projection test rc $?"
  grep -E "^\[  (PASSED|FAILED)|Failure|Expected|Which is" "$W/cuda_tests_stacked.log" | head -10
fi
# CEILINGS=0: the H100 figures measured before (bench/slice/ceilings.py) instead of measuring them again.
[ "${CEILINGS:-1}" = 1 ] && timeout 90 python3 bench/slice/ceilings.py "$W/ceilings.json" 2>&1 | tail -n 2
read -r c_mm c_cp c_f8 < <(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(d['matmul_tflops'], d['copy_gbps'], d.get('fp8_matmul_tflops') or 2 * d['matmul_tflops'])" "$W/ceilings.json" 2>/dev/null || echo "794 4240 1588")
timeout 60 "$Q" data synth --conversations 14000 --row-tokens 8192 --seed 42 --out "$W/rows" > "$W/rows.log" 2>&1
tail -n 1 "$W/rows.log"
gib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
slice_flags=()
for config in $CONFIGS; do
  tag=$(basename "$config" .json)
  if [ "$(left)" -lt 150 ]; then echo "$tag: skipped, $(left) s left"; continue; fi
  echo "== $tag ($config)"
  # INIT=0: quill's own random weights (--seed) instead of the release-format init (speed only: no convergence pair).
  if [ "${INIT:-1}" = 1 ]; then
    timeout 200 python3 tools/parity/make_init.py --config "$config" --seed 1234 --out "$W/init-$tag" > "$W/init-$tag.log" 2>&1
    tail -n 1 "$W/init-$tag.log"
    weights=(--init "$W/init-$tag")
  else
    weights=(--config "$config" --seed 1234)
  fi
  # shellcheck disable=SC2086
  if "$Q" plan --config "$config" --row-tokens 8192 --device-memory "${gib}MiB" $FP8 2>&1 | grep -qE "^fits .* yes"; then
    mem=()
  else
    read -ra mem <<< "$RECOMPUTE"
  fi
  echo "memory flags (both arms): ${mem[*]:-none}"
  common=("${weights[@]}" --rows "$W/rows" --device cuda --overwrite --lr 1e-5 --min-lr 1e-5
          --lr-decay-style constant --clip-grad 1.0 --warmup-steps "$WARMUP" "${mem[@]}")
  [ "$tag" = slice ] && slice_flags=("${common[@]}")
  for arm in bf16 fp8; do
    [ $arm = fp8 ] && [ "${NO_FP8:-0}" = 1 ] && continue
    extra=(); [ $arm = fp8 ] && read -ra extra <<< "$FP8"
    train "$tag-$arm-gb1" "$Q" 150 "${common[@]}" --profile-ceilings "$c_mm" "$c_cp" "$c_f8" "${extra[@]}" \
      --steps "$CONV_STEPS" --global-batch 1
    if [ "$tag" = slice ] && [ "$(left)" -gt 100 ]; then
      train "$tag-$arm-gb8" "$Q" 150 "${common[@]}" --profile-ceilings "$c_mm" "$c_cp" "$c_f8" "${extra[@]}" \
        --steps "$GB8_STEPS" --global-batch 8 --profile-step $((WARMUP - 1))
      grep -A40 "^by op:" "$W/$tag-$arm-gb8"/op_profile_step*.txt 2>/dev/null | head -32
    fi
    # BASE_EARLY=1: the base build's arms right after this build's bf16 arms (issue 41 first when time is short).
    [ "$tag" = slice ] && [ $arm = bf16 ] && [ "${BASE_EARLY:-0}" = 1 ] && base_arm
  done
  if [ "$tag" = slice ] && [ "${FP8_DENSE_ARM:-1}" = 1 ] && [ "$(left)" -gt 150 ]; then
    # The dense FP8 GEMMs through quill's kernel as one group (--grouped-gemm-kernel wgmma) against cuBLASLt (auto).
    read -ra extra <<< "$FP8 --grouped-gemm-kernel wgmma"
    train "$tag-fp8dense-gb8" "$Q" 150 "${common[@]}" --profile-ceilings "$c_mm" "$c_cp" "$c_f8" "${extra[@]}" \
      --steps "$GB8_STEPS" --global-batch 8 --profile-step $((WARMUP - 1))
    grep -A40 "^by op:" "$W/$tag-fp8dense-gb8"/op_profile_step*.txt 2>/dev/null | head -32
  fi
  echo "-- $tag: quill check convergence, FP8 against bf16, one row per step"
  "$Q" check convergence --candidate "$W/$tag-fp8-gb1/metrics.jsonl" --reference "$W/$tag-bf16-gb1/metrics.jsonl" 2>&1 |
    tail -n 12
  keep
  [ "$tag" = slice ] && [ "${BASE_EARLY:-0}" != 1 ] && base_arm
done
date -u +%T
keep
} 2>&1 | tee "$OUT/fp8.txt"
