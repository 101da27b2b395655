#!/usr/bin/env bash
# One GPU parity run of quill against Hugging Face transformers (issue 3, items 3 and 4), for one device call.
#
#   tools/parity/run_parity.sh CONFIG ROWS_DIR ROW_TOKENS [GLOBAL_BATCH]
#
#   CONFIG        transformers-schema text config (configs/tiny.json, configs/slice.json)
#   ROWS_DIR      quill rows directory; built with `$QUILL data synth --row-tokens ROW_TOKENS` when it holds no rows.bin
#   ROW_TOKENS    tokens per row (checked against an existing ROWS_DIR)
#   GLOBAL_BATCH  rows per optimizer step, one per micro-batch (default 4)
#
# Phases (PHASES, default "init quill ref compare"), in this order:
#   init     make_init.py: release-format checkpoint (BF16, F32 router bias/scale) in $WORK/init
#   quill    $QUILL train --device cuda on that checkpoint and the rows, step-$DUMP_STEP gradients: $WORK/quill
#   ref      train_reference.py twice from the same weights: $WORK/ref1 and $WORK/ref2 (run-to-run noise). Run 1
#            compares quill's gradient file with its own gradients in process (ref1/grad_errors_stepK.json) and,
#            when the disk has room (GRAD_FILES=auto), also writes its own gradient file for compare.py.
#   compare  compare.py: per-step losses, the §4 convergence check, strict figures, per-tensor gradient errors
# Small results go to $OUT (the device tool returns at most 8 files), three per config NAME (so two configs can
# share one $OUT): NAME-compare.txt, NAME-compare.json and NAME-logs.tar.gz (metrics_{quill,ref1,ref2}.jsonl, the
# logs, run.json files, gradient error reports, init.json, config.json). Exit status: compare.py's (0 = figures
# met); 3 when an arm failed.
#
# Environment [defaults]:
#   QUILL      quill binary built with CUDA [first of: quill on PATH, build-cuda/quill, build/quill]; a lib/ folder
#              beside its bin/ folder (scripts/gpu-bundle.sh) is put on LD_LIBRARY_PATH
#   PYTHON [python3]  WORK [tools/parity/work/NAME]  OUT [tools/parity/work/out-NAME]
#   STEPS [20]  SEED [1234]  DUMP_STEP [0]  LR, MIN_LR [3e-3, 3e-4 when hidden_size <= 512, else 3e-4, 3e-5]
#   WARMUP [0.1]  WD [0.1]  BETA1 [0.9]  BETA2 [0.95]  EPS [1e-8]  CLIP [1.0]  PRECISION [bf16]
#   INIT_FP32 [0: release dtypes]  REUSE_INIT [0]  KEEP [0: delete the multi-GB files at the end]
#   GRAD_FILES [auto]: 1 = the reference also writes its gradient file and compare.py reads both files, 0 = never
#              (the in-process errors only), auto = when that file is at most 2 GiB (tiny: yes; the slice, 17 GiB:
#              no, which saves the disk and about a minute of writing and reading).
#   quill writes no training checkpoint (none without --save): its fp32 weights + Adam moments would be 55 GB for the slice.
#   QUILL_EXTRA_ARGS   more flags for quill train
#   REF_DEVICE [cuda]  the reference's device (cpu only to test these scripts without a GPU)
#   REF_REPEAT [1]     0: train the reference once (no run-to-run figure; it measured 0 on the H200, saves a run)
set -uo pipefail

if [ $# -lt 3 ]; then
  sed -n '2,/^set -uo/p' "$0" | sed '$d'
  exit 2
fi
CONFIG=$1
ROWS=$2
ROW_TOKENS=$3
GB=${4:-4}

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
name=$(basename "$CONFIG" .json)
PY=${PYTHON:-python3}
WORK=${WORK:-$here/work/$name}
OUT=${OUT:-$here/work/out-$name}
PHASES=${PHASES:-init quill ref compare}
STEPS=${STEPS:-20}
SEED=${SEED:-1234}
DUMP_STEP=${DUMP_STEP:-0}
WARMUP=${WARMUP:-0.1}
WD=${WD:-0.1}
BETA1=${BETA1:-0.9}
BETA2=${BETA2:-0.95}
EPS=${EPS:-1e-8}
CLIP=${CLIP:-1.0}
PRECISION=${PRECISION:-bf16}
KEEP=${KEEP:-0}
GRAD_FILES=${GRAD_FILES:-auto}
export PYTHONUNBUFFERED=1
export PYTORCH_CUDA_ALLOC_CONF=${PYTORCH_CUDA_ALLOC_CONF:-expandable_segments:True}

mkdir -p "$WORK" "$OUT"
T0=$(date +%s)
log() { echo "[run_parity +$(( $(date +%s) - T0 ))s] $*"; }
has_phase() { case " $PHASES " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
free_bytes() { df -P -B1 "$WORK" | awk 'NR==2 {print $4}'; }
lines_in() { if [ -f "$1" ]; then grep -c . "$1"; else echo 0; fi; }

hidden=$("$PY" -c "import json,sys; d=json.load(open(sys.argv[1])); d=d.get('text_config', d); print(d['hidden_size'])" "$CONFIG") || {
  echo "run_parity: cannot read hidden_size from $CONFIG"; exit 2; }
if [ "$hidden" -le 512 ]; then
  LR=${LR:-3e-3}; MIN_LR=${MIN_LR:-3e-4}
else
  LR=${LR:-3e-4}; MIN_LR=${MIN_LR:-3e-5}
fi

# ---- quill binary --------------------------------------------------------------------------------
if [ -z "${QUILL:-}" ]; then
  for q in "$(command -v quill 2>/dev/null)" "$repo/build-cuda/quill" "$repo/build/quill"; do
    if [ -n "$q" ] && [ -x "$q" ]; then QUILL=$q; break; fi
  done
fi
QUILL=${QUILL:-}
if [ -n "$QUILL" ]; then
  QUILL=$(cd "$(dirname "$QUILL")" && pwd)/$(basename "$QUILL")
  qlib=$(dirname "$(dirname "$QUILL")")/lib
  if [ -d "$qlib" ]; then export LD_LIBRARY_PATH="$qlib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; fi
fi

log "config $CONFIG (hidden $hidden), rows $ROWS ($ROW_TOKENS tokens), global batch $GB, steps $STEPS"
log "lr $LR -> $MIN_LR cosine, warm-up fraction $WARMUP, wd $WD, betas ($BETA1, $BETA2), eps $EPS, clip $CLIP"
log "work $WORK, out $OUT, quill ${QUILL:-<none>}, phases: $PHASES"
{ nvidia-smi --query-gpu=name,memory.used,memory.total,driver_version --format=csv,noheader 2>/dev/null || true
  df -h "$WORK" | tail -n 1
  "$PY" -c "import torch, transformers, numpy, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'transformers', transformers.__version__, 'numpy', numpy.__version__)" 2>&1
} | tee "$WORK/env.txt"

status=0

# ---- rows ----------------------------------------------------------------------------------------
if [ ! -f "$ROWS/rows.bin" ]; then
  if [ -z "$QUILL" ]; then echo "run_parity: $ROWS has no rows.bin and no quill binary to build it"; exit 2; fi
  log "building synthetic rows: $QUILL data synth --row-tokens $ROW_TOKENS --out $ROWS"
  "$QUILL" data synth --row-tokens "$ROW_TOKENS" --out "$ROWS" > "$WORK/rows.log" 2>&1 || {
    cat "$WORK/rows.log"; echo "run_parity: quill data synth failed"; exit 2; }
fi
"$PY" - "$here" "$ROWS" "$ROW_TOKENS" "$STEPS" "$GB" <<'EOF' || exit 2
import sys
sys.path.insert(0, sys.argv.pop(1))
from parity_io import RowsDir
r = RowsDir(sys.argv[1])
T, steps, gb = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
if r.row_tokens != T:
    sys.exit(f"run_parity: {sys.argv[1]} has rows of {r.row_tokens} tokens, not {T}")
print(f"rows: {r.rows} rows of {T} tokens, max id {r.max_token_id}, supervised {int(r.supervised.sum())}; "
      f"{steps} steps x {gb} rows use {steps * gb} rows" + (" (wrapping)" if steps * gb > r.rows else ""))
EOF

common=(--steps "$STEPS" --global-batch "$GB" --lr "$LR" --min-lr "$MIN_LR" --warmup-fraction "$WARMUP"
        --weight-decay "$WD" --beta1 "$BETA1" --beta2 "$BETA2" --adam-eps "$EPS" --clip-grad "$CLIP"
        --dump-grads-step "$DUMP_STEP")
g=grads_step$DUMP_STEP.safetensors

# ---- init ----------------------------------------------------------------------------------------
if has_phase init; then
  if [ "${REUSE_INIT:-0}" = 1 ] && [ -f "$WORK/init/init.json" ] && [ -f "$WORK/init/model.safetensors" ]; then
    log "reusing $WORK/init"
  else
    log "make_init"
    fp32=()
    if [ "${INIT_FP32:-0}" = 1 ]; then fp32=(--fp32); fi
    "$PY" "$here/make_init.py" --config "$CONFIG" --seed "$SEED" --out "$WORK/init" ${fp32[@]+"${fp32[@]}"} 2>&1 | tee "$WORK/init.log"
    [ "${PIPESTATUS[0]}" = 0 ] || { echo "run_parity: make_init failed"; status=3; }
  fi
fi
values=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['values'])" "$WORK/init/init.json" 2>/dev/null || echo 0)

# ---- quill ---------------------------------------------------------------------------------------
if has_phase quill; then
  if [ -z "$QUILL" ]; then
    echo "run_parity: no quill binary (set QUILL)"; status=3
  elif [ ! -f "$WORK/init/model.safetensors" ]; then
    echo "run_parity: no init checkpoint"; status=3
  else
    qout=$WORK/quill
    rm -rf "$qout"
    mkdir -p "$qout"
    # shellcheck disable=SC2206
    extra=(${QUILL_EXTRA_ARGS:-})
    cmd=("$QUILL" train --init "$WORK/init" --rows "$ROWS" --device cuda "${common[@]}" --lr-decay-style cosine
         --freeze-preset miles --loss-vocab unpadded --overwrite --out "$qout" ${extra[@]+"${extra[@]}"})
    log "quill: ${cmd[*]}"
    "${cmd[@]}" > "$WORK/quill.log" 2>&1
    qrc=$?
    tail -n 40 "$WORK/quill.log"
    [ "$qrc" = 0 ] || { echo "run_parity: quill failed (exit $qrc)"; status=3; }
    log "quill done (exit $qrc)"
  fi
fi

# ---- reference (twice) ---------------------------------------------------------------------------
if has_phase ref && [ -f "$WORK/init/model.safetensors" ]; then
  rm -rf "$WORK/ref1" "$WORK/ref2"
  refargs=(--init "$WORK/init" --rows "$ROWS" "${common[@]}" --precision "$PRECISION" --device "${REF_DEVICE:-cuda}"
           --out "$WORK/ref1")
  [ "${REF_REPEAT:-1}" = 1 ] && refargs+=(--repeat-out "$WORK/ref2")
  if [ -f "$WORK/quill/$g" ]; then refargs+=(--compare-grads "$WORK/quill/$g"); fi
  files=$GRAD_FILES
  if [ "$files" = auto ]; then
    free=$(free_bytes)
    if [ $(( values * 4 )) -le $(( 2 << 30 )) ] && [ "$free" -gt $(( values * 4 + (4 << 30) )) ]; then files=1; else files=0; fi
    log "the reference's gradient file would take $(( values * 4 >> 20 )) MiB ($(( free >> 30 )) GiB free) -> write it: $files (otherwise the errors are computed in process only)"
  fi
  if [ "$files" != 1 ]; then refargs+=(--no-grads-file); fi
  log "reference (transformers) x2"
  "$PY" "$here/train_reference.py" "${refargs[@]}" 2>&1 | tee "$WORK/ref.log"
  [ "${PIPESTATUS[0]}" = 0 ] || { echo "run_parity: train_reference failed"; status=3; }
  log "reference done"
elif has_phase ref; then
  echo "run_parity: no init checkpoint for the reference"; status=3
fi

# ---- quill again, replaying the reference's step-K expert choice ----------------------------------
# bf16 rounding can flip a near-tied top-k choice between implementations; with the reference's own
# choice replayed (miles' routing replay), the step-K gradients compare numerics alone.
if has_phase quill && [ -f "$WORK/ref1/routing_step$DUMP_STEP.safetensors" ] && [ -f "$WORK/ref1/$g" ]; then
  rm -rf "$WORK/quill-replay"
  "$QUILL" train --init "$WORK/init" --rows "$ROWS" --device cuda "${common[@]}" --lr-decay-style cosine \
    --freeze-preset miles --loss-vocab unpadded --overwrite --stop-after $((DUMP_STEP + 1)) \
    --replay-routing "$WORK/ref1/routing_step$DUMP_STEP.safetensors" --out "$WORK/quill-replay" \
    > "$WORK/quill-replay.log" 2>&1 || { echo "run_parity: quill (routing replay) failed"; tail "$WORK/quill-replay.log"; }
fi

# ---- compare -------------------------------------------------------------------------------------
crc=0
if has_phase compare; then
  if [ -f "$WORK/quill/metrics.jsonl" ] && [ -f "$WORK/ref1/metrics.jsonl" ]; then
    args=(--candidate "$WORK/quill/metrics.jsonl" --reference "$WORK/ref1/metrics.jsonl")
    if [ -f "$WORK/ref2/metrics.jsonl" ]; then args+=(--reference2 "$WORK/ref2/metrics.jsonl"); fi
    if [ -f "$WORK/quill/$g" ] && [ -f "$WORK/ref1/$g" ]; then
      args+=(--candidate-grads "$WORK/quill/$g" --reference-grads "$WORK/ref1/$g")
    elif [ -f "$WORK/ref1/grad_errors_step$DUMP_STEP.json" ]; then
      args+=(--grad-errors "$WORK/ref1/grad_errors_step$DUMP_STEP.json")
    else
      echo "run_parity: no gradients to compare (quill/$g, ref1/$g or ref1/grad_errors_step$DUMP_STEP.json)"
      status=3
    fi
    if [ -f "$WORK/ref2/grad_noise_step$DUMP_STEP.json" ]; then
      args+=(--reference-grad-noise "$WORK/ref2/grad_noise_step$DUMP_STEP.json")
    fi
    log "compare quill vs reference"
    "$PY" "$here/compare.py" "${args[@]}" --json "$OUT/$name-compare.json" 2>&1 | tee "$OUT/$name-compare.txt"
    crc=${PIPESTATUS[0]}
  elif [ -f "$WORK/ref1/metrics.jsonl" ] && [ -f "$WORK/ref2/metrics.jsonl" ]; then
    log "no quill run: comparing the reference with itself (run 2 as the candidate; strict figures not required)"
    "$PY" "$here/compare.py" --candidate "$WORK/ref2/metrics.jsonl" --reference "$WORK/ref1/metrics.jsonl" \
      --no-strict --json "$OUT/$name-compare.json" 2>&1 | tee "$OUT/$name-compare.txt"
    crc=${PIPESTATUS[0]}
  else
    echo "run_parity: nothing to compare"; status=3
  fi
  if [ -f "$WORK/quill-replay/$g" ] && [ -f "$WORK/ref1/$g" ] && [ -f "$WORK/quill/metrics.jsonl" ]; then
    log "compare quill's step-$DUMP_STEP gradients under the reference's routing"
    "$PY" "$here/compare.py" --candidate "$WORK/quill/metrics.jsonl" --reference "$WORK/ref1/metrics.jsonl" \
      --candidate-grads "$WORK/quill-replay/$g" --reference-grads "$WORK/ref1/$g" \
      --json "$OUT/$name-replay-compare.json" > "$OUT/$name-replay-compare.txt" 2>&1
    grep -A14 "^gradients" "$OUT/$name-replay-compare.txt"
  fi
fi

# ---- small files back, big files away --------------------------------------------------------------
(
  cd "$WORK" || exit 0
  files=()
  for f in quill/metrics.jsonl ref1/metrics.jsonl ref2/metrics.jsonl env.txt rows.log init.log ref.log quill.log \
           init/init.json init/config.json ref1/run.json ref2/run.json \
           "ref1/grad_errors_step$DUMP_STEP.json" "ref2/grad_noise_step$DUMP_STEP.json" \
           "ref1/routing_step$DUMP_STEP.safetensors"; do
    if [ -f "$f" ]; then files+=("$f"); fi
  done
  tar czf "$OUT/$name-logs.tar.gz" "${files[@]}"
)
if [ "$KEEP" != 1 ]; then
  rm -f "$WORK"/ref1/grads_step*.safetensors "$WORK"/quill/grads_step*.safetensors "$WORK"/quill-replay/grads_step*.safetensors
  if [ "${REUSE_INIT:-0}" != 1 ]; then rm -f "$WORK/init/model.safetensors"; fi
fi
log "done: compare exit $crc, arms status $status; in $OUT: $(cd "$OUT" && echo *)"
if [ "$status" != 0 ]; then exit "$status"; fi
exit "$crc"
