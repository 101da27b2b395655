#!/usr/bin/env bash
# Issue 27's figures, one call on the `nvidia-h200` machine: quill's Hugging Face exports loaded by
# transformers with the class their config.json names, every key accounted for, and transformers' loss
# at the exported weights against quill's (tools/parity/check_export.py; docs/hf-export.md).
#
#   tiny-transformers-fp32/bf16  configs/tiny.json from a random init (seed 1), 20 steps on the GPU, exported in
#                                the default form (transformers), fp32 and bf16
#   tiny-release-fp32/bf16       make_init.py's release-format tiny init (seed 1), 20 steps on the GPU, exported in
#                                the default form (release), fp32 and bf16
#   slice-release-bf16           make_init.py's release-format slice init, 2 steps of 2 rows of 8,192 tokens on the
#                                GPU, exported in bf16 (the default)
# quill's loss at each export's weights: `quill train --init EXPORT --steps 1 --lr 0`, step 0 (computed before the
# first optimizer step): on the CPU (fp32) for tiny, compared to transformers' fp32 loss within 1e-5 relative;
# on the GPU (bf16 compute) for the slice, against transformers in fp32 within SLICE_TOL (bf16 rounding).
#
# Carry the bundle from `scripts/gpu-bundle.sh build-cuda .gpu`. Writes to $OUT: export-check.txt (the table),
# export-check.json (every figure), export-check-logs.tar.gz (logs, configs, metrics). Exit 0 when every case
# passes, 1 when one misses, 2 when a phase failed.
# Environment [defaults]: QUILL [.gpu/bin/quill] PYTHON [python3] WORK [/tmp/export-check] SLICE [1: run the slice]
#   SLICE_TOL [1e-2] SLICE_VALUES [false: the slice's 4.6e9 loaded values are not compared with the file one by one
#   (the tiny cases compare every value through the same code; true does it, about a minute more)] DEVICE [cuda: where quill trains] DRY [0; 1: no torch, no GPU — quill on the CPU, the release
#   init written by quill itself (--hf-format release from make_init's tiny config.json), check_export --static-only,
#   no slice: tests this script's flow on a machine without torch]
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
export LD_LIBRARY_PATH=$repo/.gpu/lib:${LD_LIBRARY_PATH:-} NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
export PYTORCH_CUDA_ALLOC_CONF=${PYTORCH_CUDA_ALLOC_CONF:-expandable_segments:True}
Q=${QUILL:-$repo/.gpu/bin/quill}
PY=${PYTHON:-python3}
OUT=${OUT:-/tmp/out}
W=${WORK:-/tmp/export-check}
DRY=${DRY:-0}
SLICE=${SLICE:-1}
SLICE_TOL=${SLICE_TOL:-1e-2}
SLICE_VALUES=${SLICE_VALUES:-false}
DEVICE=${DEVICE:-cuda}
STATIC=()
if [ "$DRY" = 1 ]; then DEVICE=cpu; SLICE=0; STATIC=(--static-only); fi
mkdir -p "$OUT"
rm -rf "$W"
mkdir -p "$W/logs"
T0=$(date +%s)
log() { echo "[export-check +$(( $(date +%s) - T0 ))s] $*"; }
# run LIMIT_S LOGNAME CMD...: the command's output to logs/LOGNAME.log; its tail on failure
run() {
  local limit=$1 name=$2; shift 2
  log "$name: $*"
  timeout "$limit" "$@" > "$W/logs/$name.log" 2>&1
  local rc=$?
  if [ $rc -ne 0 ]; then log "$name FAILED (exit $rc)"; tail -15 "$W/logs/$name.log"; fi
  return $rc
}
finish() {
  tar -C "$W" -czf "$OUT/export-check-logs.tar.gz" logs $(cd "$W" && ls -d */hf/config.json */metrics.jsonl \
    */eval/metrics.jsonl *-init/config.json 2>/dev/null) 2>/dev/null
  log "done (exit $1); in $OUT: $(ls "$OUT" | tr '\n' ' ')"
  exit "$1"
}
[ -x "$Q" ] || { echo "export-check: no quill binary at $Q (carry the bundle in .gpu/, or set QUILL)"; exit 2; }
command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
if [ "$DRY" != 1 ]; then
  "$PY" -c "import torch, transformers, safetensors, numpy; print('torch', torch.__version__, 'transformers',
transformers.__version__, 'cuda', torch.cuda.is_available())" || { echo "export-check: python lacks torch/transformers"; exit 2; }
fi

train_flags=(--global-batch 4 --steps 20 --lr 3e-3 --min-lr 3e-4 --warmup-fraction 0.1 --weight-decay 0.1 --beta2 0.95
             --device "$DEVICE" --overwrite --quiet --save-hf)
# eval NAME EXPORT ROWS R DEVICE: quill's step-0 loss at the export's weights -> $W/NAME/eval/metrics.jsonl
eval_export() {
  run "${6:-120}" "$1-eval" "$Q" train --init "$2" --rows "$3" --steps 1 --global-batch "$4" --lr 0 --min-lr 0 \
    --warmup-fraction 0 --device "$5" --overwrite --quiet --out "$W/$1/eval"
}
case_json() {  # name export rows R metrics tol device golden init check_values
  printf '{"name": "%s", "export": "%s", "rows": "%s", "rows_count": %s, "quill_metrics": "%s", "tol": %s, "device": "%s", "golden": "%s", "init": "%s", "check_values": %s}' "$@"
}

# ---- tiny ------------------------------------------------------------------------------------------
run 60 rows256 "$Q" data synth --row-tokens 256 --out "$W/rows256" || finish 2
if [ "$DRY" = 1 ]; then
  # make_init's multimodal tiny config (tests/fixtures/hf/names/tiny.release.json), random weights from quill
  "$PY" -c "import json,sys; json.dump(json.load(open(sys.argv[1]))['config'], open(sys.argv[2], 'w'), indent=1)" \
    tests/fixtures/hf/names/tiny.release.json "$W/tiny-mm.json" || finish 2
  run 60 tiny-init "$Q" train --config "$W/tiny-mm.json" --rows "$W/rows256" --steps 1 --global-batch 1 --lr 0 \
    --device cpu --overwrite --quiet --save-hf --hf-format release --out "$W/tiny-init-run" || finish 2
  ln -s "$W/tiny-init-run/hf" "$W/tiny-init"
else
  run 120 tiny-init "$PY" tools/parity/make_init.py --config configs/tiny.json --seed 1 --out "$W/tiny-init" || finish 2
fi
cases=()
G=tests/fixtures/hf/names
for dt in fp32 bf16; do
  run 120 "tiny-transformers-$dt" "$Q" train --config configs/tiny.json --rows "$W/rows256" --seed 1 "${train_flags[@]}" \
    --save-hf-dtype "$dt" --out "$W/tiny-transformers-$dt" &&
  eval_export "tiny-transformers-$dt" "$W/tiny-transformers-$dt/hf" "$W/rows256" 4 cpu &&
  cases+=("$(case_json "tiny-transformers-$dt" "$W/tiny-transformers-$dt/hf" "$W/rows256" 4 \
             "$W/tiny-transformers-$dt/eval/metrics.jsonl" 1e-5 cpu "$G/tiny.transformers.json" "" true)")
  run 120 "tiny-release-$dt" "$Q" train --init "$W/tiny-init" --rows "$W/rows256" "${train_flags[@]}" \
    --save-hf-dtype "$dt" --out "$W/tiny-release-$dt" &&
  eval_export "tiny-release-$dt" "$W/tiny-release-$dt/hf" "$W/rows256" 4 cpu &&
  cases+=("$(case_json "tiny-release-$dt" "$W/tiny-release-$dt/hf" "$W/rows256" 4 \
             "$W/tiny-release-$dt/eval/metrics.jsonl" 1e-5 cpu "$G/tiny.release.json" "$W/tiny-init" true)")
done
[ ${#cases[@]} -gt 0 ] || finish 2
(IFS=,; echo "{\"cases\": [${cases[*]}]}") > "$W/tiny-plan.json"
log "check_export: ${#cases[@]} tiny cases"
timeout 240 "$PY" tools/parity/check_export.py --plan "$W/tiny-plan.json" --json "$W/tiny.json" "${STATIC[@]}" \
  2>&1 | tee "$W/logs/check-tiny.log"
parts=("$W/tiny.json")
[ ${#cases[@]} -eq 4 ] || parts+=("$W/a-tiny-phase-failed.json")

# ---- the slice ---------------------------------------------------------------------------------------
if [ "$SLICE" = 1 ]; then
  parts+=("$W/slice.json")
  run 120 rows8192 "$Q" data synth --row-tokens 8192 --out "$W/rows8192" &&
  run 180 slice-init "$PY" tools/parity/make_init.py --config configs/slice.json --seed 1234 --out "$W/slice-init" &&
  run 300 slice-release-bf16 "$Q" train --init "$W/slice-init" --rows "$W/rows8192" --global-batch 2 --steps 2 \
    --lr 3e-4 --min-lr 3e-5 --warmup-fraction 0 --weight-decay 0.1 --beta2 0.95 --device cuda --overwrite \
    --quiet --save-hf --out "$W/slice-release-bf16" &&
  { rm -f "$W/slice-init/model.safetensors"; true; } &&  # the disk: 8.6 GiB each
  eval_export slice-release-bf16 "$W/slice-release-bf16/hf" "$W/rows8192" 2 cuda 300 &&
  (echo "{\"cases\": [$(case_json slice-release-bf16 "$W/slice-release-bf16/hf" "$W/rows8192" 2 \
     "$W/slice-release-bf16/eval/metrics.jsonl" "$SLICE_TOL" cuda "" "$W/slice-init" "$SLICE_VALUES")]}") > "$W/slice-plan.json" &&
  { log "check_export: the slice"; timeout 360 "$PY" tools/parity/check_export.py --plan "$W/slice-plan.json" \
      --json "$W/slice.json" 2>&1 | tee "$W/logs/check-slice.log"; }
fi

log "summary"
"$PY" tools/parity/check_export.py --merge "${parts[@]}" --json "$OUT/export-check.json" | tee "$OUT/export-check.txt"
rc=${PIPESTATUS[0]}
finish "$rc"
