#!/usr/bin/env bash
# Issue 25 in one or two device calls on `nvidia-h200-x2` (one process per GPU, NCCL): the slice
# (configs/slice.json, 8,192-token rows, GB rows per step) on one GPU, then TP2+SP, EP2 (x DP2: experts
# split over the data-parallel ranks, as Megatron carves EP out of DP), PP2 (2 + 2 layers, GB micro-
# batches of one row) and DP2 on the same rows and seed, each profiled at one step (EP2 also with the shared
# experts overlapping the exchange, ep2o); NCCL's own bus bandwidth at the sizes those profiles show
# (nccl_probe); then tools/runs/layout_report.py: losses
# against one GPU with the noise floor (one GPU again, --attention-dq-order arrival: only the order of
# float sums differs), tokens/s per GPU, MFU, scaling efficiency, peak bytes per rank, every collective's
# own time, bus bandwidth against NCCL's and the part hidden under compute.
# Here first: cmake --build build -j2 && scripts/gpu-bundle.sh build build/gpu-bundle nccl_probe cuda_tests \
#               && git rev-parse --short HEAD > build/gpu-bundle/COMMIT
# Then two calls on the same warm machine (seven runs of ~1 min do not fit one call's 600 s with room to spare;
# the runs stay in $W between the calls, and each call copies what it has to $OUT at its end):
#   run(kind="nvidia-h200-x2", carry=["build/gpu-bundle"], command="PARTS='one noise tp2 ep2' bash scripts/gpu/two-gpu.sh")
#   run(kind="nvidia-h200-x2", carry=["build/gpu-bundle"], command="PARTS='ep2o pp2 dp2 probe report' bash scripts/gpu/two-gpu.sh")
# CPU dry run (plumbing only: no profiles, no probe):
#   Q=build/quill DEVICE=cpu CONFIG=configs/tiny.json ROW_TOKENS=64 GB=4 STEPS=3 PROFILE_STEP=-1 \
#     PARTS="one noise tp2 ep2 ep2o pp2 dp2 report" bash scripts/gpu/two-gpu.sh
# Environment [defaults]: OUT [/tmp/out]  W [/tmp/two-gpu]  CONFIG [configs/slice.json]  ROW_TOKENS [8192]
#   GB [8]  STEPS [10]  PROFILE_STEP [5]  PP_LAYERS [2,2]  DEVICE [cuda]  T [240 s a run]
#   MAX_REL_DIFF [unset: report only; set: the report fails above it (the CPU dry run's CTest uses 1e-5)]
#   PARTS [one noise tp2 ep2 ep2o pp2 dp2 probe report]
set -uo pipefail
OUT=${OUT:-/tmp/out}
W=${W:-/tmp/two-gpu}
CONFIG=${CONFIG:-configs/slice.json}
TOK=${ROW_TOKENS:-8192} GB=${GB:-8} STEPS=${STEPS:-10} PSTEP=${PROFILE_STEP:-5}
PARTS=${PARTS:-one noise tp2 ep2 ep2o pp2 dp2 probe report}
source scripts/gpu/layout-runs.sh
mkdir -p "$W" "$OUT"
{
command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader
echo "quill $(cat "$B/COMMIT" 2>/dev/null || echo local); $(date -u +%FT%TZ); $CONFIG, $TOK-token rows, $GB rows a step, $STEPS steps, profile step $PSTEP"
make_rows "$TOK" || exit 1
flags=(train --config "$CONFIG" --rows "$ROWS" --seed 1 --steps "$STEPS" --global-batch "$GB" --lr 1e-4 --min-lr 1e-5
       --warmup-fraction 0 --clip-grad 1.0 --device "${DEVICE:-cuda}" --warmup-steps 2 --quiet --overwrite)
[ "$PSTEP" -ge 0 ] && flags+=(--profile-step "$PSTEP")
if has one; then CUDA_VISIBLE_DEVICES=0 run_one one; fi
if has noise; then CUDA_VISIBLE_DEVICES=0 run_one noise --attention-dq-order arrival; fi
if has tp2; then run_mpi 2 tp2 --tp 2 --sp; fi
if has ep2; then run_mpi 2 ep2 --dp 2 --ep 2; fi
# The overlap that exists for the expert exchange: the shared experts run while the all-to-all is in flight.
if has ep2o; then run_mpi 2 ep2o --dp 2 --ep 2 --moe-shared-expert-overlap; fi
if has pp2; then run_mpi 2 pp2 --pp 2 --pp-layers "${PP_LAYERS:-2,2}"; fi
if has dp2; then run_mpi 2 dp2 --dp 2; fi
runs=(); for r in tp2 ep2 ep2o pp2 dp2; do [ -d "$W/$r" ] && runs+=("$W/$r"); done
if has probe; then probe_nccl 2 2 "${runs[@]}"; fi
if has report; then
  # The profile's sizes carry no dtype: bf16 (activations) and f32 (gradients) probes are both kept;
  # the report sets each row against the bf16 one (the f32 table is in probe-f32.log).
  probe=(); [ -f "$W/probe-bf16.jsonl" ] && probe=(--probe "$W/probe-bf16.jsonl")
  check=(); [ -n "${MAX_REL_DIFF:-}" ] && check=(--max-rel-diff "$MAX_REL_DIFF")
  python3 tools/runs/layout_report.py --reference "$W/one" --noise "$W/noise" "${probe[@]}" "${check[@]}" "${runs[@]}" \
    > "$W/layout-report.txt"; rc=$?
  cat "$W/layout-report.txt"; echo "layout_report: rc $rc"
fi
collect one noise tp2 ep2 ep2o pp2 dp2
} 2>&1 | tee -a "$OUT/two-gpu.txt"
