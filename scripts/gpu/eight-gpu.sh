#!/usr/bin/env bash
# Issue 26 in three device calls on `nvidia-h200-x8` (one process per GPU, NCCL): Inkling-Small's real
# dimensions with its first 8 layers (configs/small8: 0-1 dense, 2-7 MoE with all 256 experts), random
# weights, 8,192-token rows, GB rows per step, in the seed's layout shape as far as 8 GPUs allow it:
#   A = TP4 SP PP2 (5,3) EP4 ETP1 (DP1)   the seed's TP4 SP with two pipeline stages; EP8 cannot go with PP2
#       on 8 GPUs (Megatron's rule, quill's grid: etp*ep = 8 must divide tp*cp*dp = 4), so EP4;
#   A-off = A with the seed's optimizer offload 0.7 (or the largest fraction below it that fits the node's host
#           memory; 0.7 fits 560 GiB), overlapped copies; A-bf16 = A with bf16 moments;
#   B = TP4 SP DP2 EP8 ETP1 (PP1)          the seed's per-stage shape (TP4 x DP2 with EP8 across them);
#   B-noise = B with --attention-dq-order arrival (only the order of float sums differs: the noise floor);
#   T = DP8 EP8 (TP1 PP1), fp32 moments: quill tune's best fp32-moment layout for this model and machine
#       (`quill tune --model configs/small8 --gpus 8 --global-batch 16 --host-memory 560GiB`: rank 2, 23,903
#       tokens/s/GPU modelled, against B's 18,654 at rank 9), to check the tuner's ranking on real GPUs.
# The loss reference is B: the same model on fewer GPUs does not fit (quill plan: TP4 SP EP4 on 4 GPUs needs
# 181 GiB a GPU, or with the whole optimizer offloaded 173 GiB of pinned host memory a GPU), nor DP-only.
# Before the runs, what quill predicted for each case: `quill plan --json` (memory per stage) and the
# one-GPU rank projection (`quill train --simulate-rank` of one rank per stage, each on its own GPU, at once;
# `quill project` combines them). tools/runs/layout_report.py sets the runs against both and against B.
# Here first: cmake --build build -j2 && scripts/gpu-bundle.sh build build/gpu-bundle nccl_probe \
#               && git rev-parse --short HEAD > build/gpu-bundle/COMMIT
# Then three calls on the same warm machine ($W stays between them). Expected: an 8-rank run's start-up 1-2 min
# (random init of ~5.2 G parameters a rank on the shared host, placement, optimizer state; the seed's rank 0
# took 142 s for 8.6 G on 16 cores) plus 10 steps of ~1 s; the eight projections run at once in ~3 min:
#   run(kind="nvidia-h200-x8", carry=["build/gpu-bundle"], command="PARTS='plan project B B-noise' bash scripts/gpu/eight-gpu.sh")
#   run(kind="nvidia-h200-x8", carry=["build/gpu-bundle"], command="PARTS='A A-off' bash scripts/gpu/eight-gpu.sh")
#   run(kind="nvidia-h200-x8", carry=["build/gpu-bundle"], command="PARTS='A-bf16 T probe report' bash scripts/gpu/eight-gpu.sh")
# CPU dry run (plumbing only; 8 CPU ranks of the seed's shape at toy widths, 42 layers):
#   Q=build/quill DEVICE=cpu CONFIG=configs/seed-shape PP_LAYERS=21,21 ROW_TOKENS=64 GB=4 STEPS=3 PROFILE_STEP=-1 \
#     SIM_STEPS=2 PARTS="plan project B B-noise A A-off A-bf16 T report" bash scripts/gpu/eight-gpu.sh
# Environment [defaults]: OUT [/tmp/out]  W [/tmp/eight-gpu]  CONFIG [configs/small8]  ROW_TOKENS [8192]  GB [16]
#   STEPS [10]  PROFILE_STEP [5]  SIM_STEPS [4]  PP_LAYERS [5,3]  DEVICE [cuda]  T [420 s a run]
#   PARTS [all, in three calls as above]  MAX_REL_DIFF [unset: report only]
#   HOST_MEMORY [this machine's: the host memory the offload fraction of A-off is planned against]
set -uo pipefail
OUT=${OUT:-/tmp/out}
W=${W:-/tmp/eight-gpu}
CONFIG=${CONFIG:-configs/small8}
TOK=${ROW_TOKENS:-8192} GB=${GB:-16} STEPS=${STEPS:-10} PSTEP=${PROFILE_STEP:-5} T=${T:-420}
DEVICE=${DEVICE:-cuda}
PARTS=${PARTS:-plan project B B-noise A A-off A-bf16 T probe report}
source scripts/gpu/layout-runs.sh
mkdir -p "$W" "$OUT"
LAYOUT_A=(--tp 4 --sp --pp 2 --pp-layers "${PP_LAYERS:-5,3}" --ep 4 --etp 1)
LAYOUT_B=(--tp 4 --sp --dp 2 --ep 8 --etp 1)
LAYOUT_T=(--dp 8 --ep 8 --etp 1)
# The seed's offload fraction is 0.7; on one node that holds the whole model's optimizer state, 0.7 may need more
# host memory than the node has (quill train refuses a node whose startup peak is over 90% of it: quill plan
# predicts 485.6 GiB of a 560 GiB host for small8). The plan part picks the largest of 0.7, 0.6, ... that fits this
# machine, keeps it in $W/A-off.fraction for the call that runs A-off, and says which.
OFF_FRACTION=$(cat "$W/A-off.fraction" 2>/dev/null || echo 0.7)
OFF=(--optimizer-cpu-offload --optimizer-offload-fraction "$OFF_FRACTION" --overlap-cpu-optimizer-d2h-h2d --use-precision-aware-optimizer)
BF16=(--exp-avg-dtype bf16 --exp-avg-sq-dtype bf16 --use-precision-aware-optimizer)
# The seed's optimizer (its run line: adam, lr 1e-5 cosine to 1e-6, wd 0.1, betas 0.9/0.98), no warm-up: 10 steps.
OPTIM=(--lr 1e-5 --min-lr 1e-6 --warmup-fraction 0 --weight-decay 0.1 --beta1 0.9 --beta2 0.98 --clip-grad 1.0)
case_flags() {  # the layout and memory flags of a case
  case $1 in
    A) echo "${LAYOUT_A[@]}" ;; A-off) echo "${LAYOUT_A[@]} ${OFF[@]}" ;; A-bf16) echo "${LAYOUT_A[@]} ${BF16[@]}" ;;
    B|B-noise) echo "${LAYOUT_B[@]}" ;; T) echo "${LAYOUT_T[@]}" ;;
  esac
}
stage_ranks() {  # one world rank per pipeline stage (pp is the outermost axis of the default order)
  case $1 in A*) echo "0 4" ;; *) echo "0" ;; esac
}
{
command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader
echo "quill $(cat "$B/COMMIT" 2>/dev/null || echo local); $(date -u +%FT%TZ); $CONFIG, $TOK-token rows, $GB rows a step, $STEPS steps, profile step $PSTEP; parts: $PARTS"
make_rows "$TOK" || exit 1
flags=(train --config "$CONFIG" --rows "$ROWS" --seed 1 --steps "$STEPS" --global-batch "$GB" "${OPTIM[@]}"
       --device "$DEVICE" --warmup-steps 2 --quiet --overwrite)
[ "$PSTEP" -ge 0 ] && flags+=(--profile-step "$PSTEP")
if has plan; then
  host=(); [ -n "${HOST_MEMORY:-}" ] && host=(--host-memory "$HOST_MEMORY")
  for f in 0.7 0.6 0.5 0.4 0.3 0.2 0.1; do
    "$Q" plan "${host[@]}" --config "$CONFIG" --row-tokens "$TOK" --global-batch "$GB" --device "$DEVICE" "${LAYOUT_A[@]}" \
      --optimizer-cpu-offload --optimizer-offload-fraction $f --json > "$W/offload-$f.plan.json" 2>/dev/null
    if python3 -c "import json,sys; sys.exit(0 if all(json.load(open(sys.argv[1]))['host_fits_per_node']) else 1)" \
         "$W/offload-$f.plan.json" 2>/dev/null; then
      OFF_FRACTION=$f; echo $f > "$W/A-off.fraction"; break
    fi
    echo "offload $f: does not fit this machine's host memory at startup ($("$Q" plan "${host[@]}" --config "$CONFIG" --row-tokens "$TOK" \
      --global-batch "$GB" --device "$DEVICE" "${LAYOUT_A[@]}" --optimizer-cpu-offload --optimizer-offload-fraction $f 2>&1 | grep '^host node' | head -1))"
  done
  OFF=(--optimizer-cpu-offload --optimizer-offload-fraction "$OFF_FRACTION" --overlap-cpu-optimizer-d2h-h2d --use-precision-aware-optimizer)
  echo "A-off: offload fraction $OFF_FRACTION"
  for c in A A-off A-bf16 B T; do
    # shellcheck disable=SC2046
    "$Q" plan --config "$CONFIG" --row-tokens "$TOK" --global-batch "$GB" --device "$DEVICE" $(case_flags $c) --json \
      > "$W/$c.plan.json" 2> "$W/$c.plan.err"
    echo "plan $c: rc $? $(python3 -c "import json,sys; p=json.load(open(sys.argv[1])); print(' '.join(f\"stage {s['stage']} {s['device_total_bytes']/2**30:.1f} GiB\" for s in p['stages']), 'pinned per node', [round(b/2**30,1) for b in p['pinned_host_bytes_per_node']])" "$W/$c.plan.json" 2>/dev/null)"
  done
fi
if has project; then
  # One simulated rank per stage and case, each alone on one GPU, all at once; then the projection.
  gpu=0; pids=()
  for c in A A-off A-bf16 B T; do
    for r in $(stage_ranks $c); do
      # shellcheck disable=SC2046
      CUDA_VISIBLE_DEVICES=$((gpu % 8)) timeout "$T" "$Q" train --config "$CONFIG" --rows "$ROWS" --seed 1 \
        --steps "${SIM_STEPS:-4}" --warmup-steps 1 --global-batch "$GB" "${OPTIM[@]}" --device "$DEVICE" $(case_flags $c) \
        --simulate-rank "$r" --simulate-routing balanced --quiet --overwrite --out "$W/sim/$c-$r" < /dev/null \
        > "$W/sim-$c-$r.log" 2>&1 &
      pids+=($!); gpu=$((gpu + 1))
    done
  done
  for p in "${pids[@]}"; do wait "$p"; done
  for c in A A-off A-bf16 B T; do
    dirs=(); for r in $(stage_ranks $c); do dirs+=("$W/sim/$c-$r"); done
    "$Q" project "${dirs[@]}" --out "$W/$c.projection" > "$W/$c.projection.txt" 2>&1
    echo "projection $c: rc $?"; grep -E "step|tokens/s|MFU" "$W/$c.projection.txt" | head -6
    cp "$W/$c.projection/projection.json" "$W/$c.projection.json" 2>/dev/null
  done
fi
for c in B B-noise A A-off A-bf16 T; do
  has $c || continue
  # shellcheck disable=SC2046
  if [ $c = B-noise ]; then run_mpi 8 "$c" $(case_flags $c) --attention-dq-order arrival; else run_mpi 8 "$c" $(case_flags $c); fi
done
runs=(); for r in A A-off A-bf16 T B; do [ -d "$W/$r" ] && runs+=("$W/$r"); done
if has probe; then
  probe_nccl 8 2,4,8 "${runs[@]}"
  # The gap explained, one part of it: the projections again with the bandwidth and latency measured here
  # instead of the built-in NVLink figures (docs/comm-model.md).
  measured=$(python3 tools/runs/layout_report.py --comm-params "$W/probe-bf16.jsonl" 2>/dev/null)
  if [ -n "$measured" ]; then
    for c in A A-off A-bf16 B T; do
      dirs=(); for r in $(stage_ranks $c); do dirs+=("$W/sim/$c-$r"); done
      # shellcheck disable=SC2086
      "$Q" project "${dirs[@]}" $measured --out "$W/$c.projection-measured-nccl" > "$W/$c.projection-measured-nccl.txt" 2>&1
      echo "projection $c with $measured: rc $?"; grep -E "step|tokens/s|MFU" "$W/$c.projection-measured-nccl.txt" | head -4
    done
  fi
fi
if has report; then
  probe=(); [ -f "$W/probe-bf16.jsonl" ] && probe=(--probe "$W/probe-bf16.jsonl")
  check=(); [ -n "${MAX_REL_DIFF:-}" ] && check=(--max-rel-diff "$MAX_REL_DIFF")
  python3 tools/runs/layout_report.py --reference "$W/B" --noise "$W/B-noise" "${probe[@]}" "${check[@]}" --predictions \
    "${runs[@]}" > "$W/layout-report.txt"; rc=$?
  cat "$W/layout-report.txt"; echo "layout_report: rc $rc"
fi
collect A A-off A-bf16 B B-noise T
for c in A A-off A-bf16 B T; do
  cp "$W/$c.plan.json" "$W/$c.projection.json" "$W/$c.projection.txt" "$W/$c.projection-measured-nccl.txt" "$OUT/" 2>/dev/null
done
cp "$W"/sim-*.log "$OUT/" 2>/dev/null
} 2>&1 | tee -a "$OUT/eight-gpu.txt"
