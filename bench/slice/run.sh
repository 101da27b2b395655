#!/usr/bin/env bash
# The slice benchmark (issue 4) in one device call: quill against the transformers peer on one H200.
# bench/slice/README.md says how to call it and what each number means.
#
#   bash bench/slice/run.sh            (repository root of the device machine; the bundle in .gpu/)
#
# Phases, most important first, each under a time limit cut from one budget (BUDGET_S, default 540 s),
# so that the call ends inside the device tool's 10 minutes with whatever ran reported:
#   1. ceilings   bf16 8192^3 GEMM and a 2 GiB device copy through torch (bench/slice/ceilings.py)
#   2. init       the slice's release-format checkpoint, bf16 (tools/parity/make_init.py --config configs/slice.json)
#   3. rows       synthetic 8,192-token rows (quill data synth)
#   4. quill gb1  quill train --device cuda, one row per optimizer step, STEPS steps, warm-up WARMUP, per-op
#                 profile of step PROFILE1
#   5. quill gb8  global batch 8 (8 micro-batches), as many steps as fit (<= STEPS8) by gb1's step time,
#                 per-op profile of step PROFILE8 (default: the last warm-up step)
#   6. peer       bench/slice/peer.py: transformers, eager, plain bf16, torch AdamW, gb1 then gb8
#   7. report     bench/slice/report.py: the table, $OUT/slice-bench.{txt,json}
# Back in $OUT (the device tool returns at most 8 files): slice-bench.txt, slice-bench.json,
# op_profile_gb1.json, op_profile_gb8.json, logs.tar.gz (every log, metrics.jsonl, summary.json, peer.json,
# ceilings.json, env.txt).
#
# Environment [defaults]: QUILL [.gpu/bin/quill]  OUT [/tmp/slice-out]  WORK [/tmp/slice-work]  BUDGET_S [540]
#   STEPS [12]  STEPS8 [12]  WARMUP [3]  PROFILE1 [4]  PROFILE8 [WARMUP-1: the last warm-up step,
#   so that the profile costs gb8 no measured step]  CONVERSATIONS [14000]  SEED [1234]
#   PHASES ["ceilings init rows quill1 quill8 peer report"]  REUSE_INIT [0]
#   PEER_ARGS [""]: more flags for peer.py (e.g. --experts-implementation grouped_mm)
#   COMMIT [the bundle's COMMIT file (.gpu/COMMIT), else git describe --always --dirty, else unknown]
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
T_START=$(date +%s)
BUDGET_S=${BUDGET_S:-540}
DEADLINE=$((T_START + BUDGET_S))
QUILL=${QUILL:-$repo/.gpu/bin/quill}
OUT=${OUT:-/tmp/slice-out}
WORK=${WORK:-/tmp/slice-work}
STEPS=${STEPS:-12}
STEPS8=${STEPS8:-12}
WARMUP=${WARMUP:-3}
PROFILE1=${PROFILE1:-4}
PROFILE8=${PROFILE8:-$((WARMUP > 0 ? WARMUP - 1 : 0))}
CONVERSATIONS=${CONVERSATIONS:-14000}
SEED=${SEED:-1234}
PHASES=${PHASES:-ceilings init rows quill1 quill8 peer report}
ROW_TOKENS=8192
PY=${PYTHON:-python3}
qlib=$(dirname "$(dirname "$QUILL")")/lib
[ -d "$qlib" ] && export LD_LIBRARY_PATH="$qlib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
export PYTORCH_CUDA_ALLOC_CONF=${PYTORCH_CUDA_ALLOC_CONF:-expandable_segments:True}
mkdir -p "$OUT" "$WORK"

log() { echo "[slice +$(( $(date +%s) - T_START ))s] $*"; }
left() { echo $(( DEADLINE - $(date +%s) )); }
has() { case " $PHASES " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
# run_limited SECONDS LOGFILE CMD...: runs CMD under a wall-clock limit (never past the deadline less 20 s for
# the report), output to LOGFILE and the last lines to stdout.
run_limited() {
  local want=$1 logf=$2
  shift 2
  local cap=$(( $(left) - 20 ))
  (( want < cap )) || want=$cap
  if (( want < 5 )); then log "skipped (no time left): $*"; echo "SKIPPED: no time left" > "$logf"; return 124; fi
  timeout --signal=TERM --kill-after=10 "$want" "$@" > "$logf" 2>&1
  local rc=$?
  (( rc == 124 )) && log "stopped at its ${want}s limit: $(basename "$logf")"
  return $rc
}

# The commit: COMMIT, else the bundle's COMMIT file (written beside bin/ and lib/ when bundling; the device
# machine's copy of the tree has no .git), else git, else unknown.
COMMIT=${COMMIT:-$(cat "$(dirname "$(dirname "$QUILL")")/COMMIT" 2>/dev/null || git -C "$repo" describe --always --dirty 2>/dev/null || echo unknown)}
{
  echo "date $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit $COMMIT"
  nvidia-smi --query-gpu=name,memory.used,memory.total,driver_version,clocks.sm,clocks.mem --format=csv,noheader 2>&1
  "$PY" -c "import torch, transformers, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'transformers', transformers.__version__)" 2>&1
  "$QUILL" model info --config configs/slice.json 2>&1 | tr -d '\n '; echo
  df -h "$WORK" | tail -n 1
} > "$WORK/env.txt"
cat "$WORK/env.txt"
"$QUILL" model info --config configs/slice.json > "$WORK/model_info.json" 2>&1 || { log "quill does not run"; cat "$WORK/model_info.json"; }

# ---- 1. ceilings ------------------------------------------------------------------------------------------------
if has ceilings; then
  log "ceilings"
  run_limited 60 "$WORK/ceilings.log" "$PY" bench/slice/ceilings.py "$WORK/ceilings.json"; tail -n 2 "$WORK/ceilings.log"
fi
ceil_args=()
if [ -f "$WORK/ceilings.json" ]; then
  read -r c_mm c_cp < <("$PY" -c "import json,sys; d=json.load(open(sys.argv[1])); print(d['matmul_tflops'], d['copy_gbps'])" "$WORK/ceilings.json")
  ceil_args=(--profile-ceilings "$c_mm" "$c_cp")
fi

# ---- 2. init, 3. rows -------------------------------------------------------------------------------------------
if has init && ! { [ "${REUSE_INIT:-0}" = 1 ] && [ -f "$WORK/init/model.safetensors" ]; }; then
  log "init: make_init.py (bf16 release dtypes)"
  run_limited 200 "$WORK/init.log" "$PY" tools/parity/make_init.py --config configs/slice.json --seed "$SEED" \
    --out "$WORK/init"; tail -n 3 "$WORK/init.log"
fi
if has rows; then
  log "rows: $CONVERSATIONS conversations at $ROW_TOKENS tokens"
  rm -rf "$WORK/rows"
  run_limited 60 "$WORK/rows.log" "$QUILL" data synth --conversations "$CONVERSATIONS" --row-tokens "$ROW_TOKENS" \
    --seed 42 --out "$WORK/rows"
  nrows=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['rows'])" "$WORK/rows/manifest.json" 2>/dev/null || echo 0)
  log "rows: $nrows rows (gb8 x $STEPS8 steps uses $((8 * STEPS8)); fewer wrap around)"
fi

common=(--init "$WORK/init" --rows "$WORK/rows" --device cuda --overwrite --lr 1e-5 --min-lr 1e-5
        --lr-decay-style constant --clip-grad 1.0 --warmup-steps "$WARMUP" ${ceil_args[@]+"${ceil_args[@]}"})

# ---- 4. quill, one row per step ----------------------------------------------------------------------------------
if has quill1; then
  log "quill gb1: $STEPS steps, profile step $PROFILE1"
  rm -rf "$WORK/quill-gb1"
  run_limited 170 "$WORK/quill-gb1.log" "$QUILL" train "${common[@]}" --steps "$STEPS" --global-batch 1 \
    --profile-step "$PROFILE1" --out "$WORK/quill-gb1"
  echo "quill gb1 exit $?"; grep -E "^steps >=|error|Error" "$WORK/quill-gb1.log" | tail -n 3
fi

# ---- 5. quill, global batch 8 ------------------------------------------------------------------------------------
if has quill8; then
  # As many steps as fit by gb1's step time (the peer keeps ~40% of what is left), at most STEPS8.
  s8=$STEPS8
  if [ -f "$WORK/quill-gb1/summary.json" ]; then
    s8=$("$PY" - "$WORK/quill-gb1/summary.json" "$(left)" "$STEPS8" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1])); left = float(sys.argv[2]); cap = int(sys.argv[3])
row = d.get("median_step_s") or 0
avail = 0.6 * (left - 20) - 45  # quill's share of what is left, less its start-up (load of the checkpoint)
print(max(5, min(cap, int(avail / (8 * row * 1.05)))) if row > 0 else cap)
EOF
)
  fi
  p8=$PROFILE8; (( p8 < s8 )) || p8=$(( s8 - 1 ))
  log "quill gb8: $s8 steps, profile step $p8"
  rm -rf "$WORK/quill-gb8"
  budget8=$(( ($(left) - 20) * 6 / 10 ))
  run_limited "$budget8" "$WORK/quill-gb8.log" "$QUILL" train "${common[@]}" --steps "$s8" --global-batch 8 \
    --profile-step "$p8" --out "$WORK/quill-gb8"
  echo "quill gb8 exit $?"; grep -E "^steps >=|error|Error" "$WORK/quill-gb8.log" | tail -n 3
fi

# ---- 6. the transformers peer ------------------------------------------------------------------------------------
if has peer; then
  log "peer: gb1 $STEPS steps, gb8 up to $STEPS8 steps"
  run_limited $(( $(left) - 20 )) "$WORK/peer.log" "$PY" bench/slice/peer.py --init "$WORK/init" --rows "$WORK/rows" \
    --out "$WORK/peer.json" --steps "$STEPS" --steps8 "$STEPS8" --warmup "$WARMUP" --deadline $(( DEADLINE - 25 )) \
    ${PEER_ARGS:-}
  echo "peer exit $?"; grep -E "out of memory|Error|done in" "$WORK/peer.log" | tail -n 3
fi

# ---- 7. report ---------------------------------------------------------------------------------------------------
if has report; then
  for g in 1 8; do
    f=$(ls "$WORK/quill-gb$g"/op_profile_step*.json 2>/dev/null | head -n 1)
    [ -n "$f" ] && cp "$f" "$OUT/op_profile_gb$g.json"
  done
  tar -C "$WORK" -czf "$OUT/logs.tar.gz" --exclude='init/model.safetensors' --exclude='rows/rows.bin' \
    $(cd "$WORK" && ls -d env.txt model_info.json ceilings.json ceilings.log init.log init/init.json rows.log \
      rows/manifest.json quill-gb1.log quill-gb8.log quill-gb1 quill-gb8 peer.json peer.log 2>/dev/null)
  "$PY" bench/slice/report.py --work "$WORK" --out "$OUT" --commit "$COMMIT"
fi
log "done"
