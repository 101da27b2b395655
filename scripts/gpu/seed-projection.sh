#!/usr/bin/env bash
# One seed GPU's share on one H200 (issue 21): Inkling-Small (tests/fixtures/configs/inkling-small-hf.json,
# random weights: no checkpoint needed) in the seed's layout (TP4 SP PP4 12/10/10/10 EP8 ETP1 DP2, 8,192-token
# rows, 128 rows per step: 64 micro-batches per pipeline; docs/seed-flags.md, tests/fixtures/recipes/seed.yaml)
# as `quill train --simulate-rank R` (docs/simulate-rank.md) for a first-stage rank (0), a middle-stage rank
# (8) and the last-stage rank (24), each with the seed's optimizer offload 0.7 (overlapped copies) and with
# bf16 Adam moments and no offload. Per case: the memory plan, compute ms per micro-batch, peak GiB, the
# collective bytes per step and the projection of the 32-GPU run (docs/comm-model.md). Token routing of the
# expert exchange: balanced (--simulate-routing).
#
# GLOBAL_BATCH=32 (16 micro-batches per pipeline instead of 64) measures the same per-micro-batch compute, peak
# memory (1F1B keeps at most pp micro-batches in flight either way) and optimizer step in a quarter of the passes;
# `quill project --global-batch 128 DIR...` then projects the seed's workload from them.
# Each case is one quill train run, under the device's 10-minute call limit (STEPS steps); give the cases a
# call should run (default all six, which need more than one call):
#   here:   cmake --build build -j2 && scripts/gpu-bundle.sh build build/gpu-bundle
#   device: run(carry=["build/gpu-bundle"], command="bash scripts/gpu/seed-projection.sh first-offload middle-offload")
#           run(carry=["build/gpu-bundle"], command="bash scripts/gpu/seed-projection.sh last-offload first-bf16")
#           run(carry=["build/gpu-bundle"], command="bash scripts/gpu/seed-projection.sh middle-bf16 last-bf16")
#   here:   build/quill project OUT_A/first-offload OUT_A/middle-offload OUT_B/last-offload     (the seed's 4 stages)
# $OUT/CASE/ receives the run's summary.json, collectives.json, metrics.jsonl, projection.json, plan and log, so
# that `quill project` combines the stages here (it reads only those files).
#
# Dry run on the CPU (the command lines, not the figures): Q=build/quill DEVICE=cpu CONFIG=configs/seed-shape \
#   ROW_TOKENS=32 GLOBAL_BATCH=16 STEPS=2 OUT=/tmp/seed-dry bash scripts/gpu/seed-projection.sh
set -uo pipefail
# shellcheck source=scripts/gpu/bundle-env.sh
source "$(dirname "$0")/bundle-env.sh"
CONFIG=${CONFIG:-tests/fixtures/configs/inkling-small-hf.json}
ROW_TOKENS=${ROW_TOKENS:-8192}
GLOBAL_BATCH=${GLOBAL_BATCH:-128}
STEPS=${STEPS:-3}
WARMUP=${WARMUP:-1}
PROFILE_STEP=${PROFILE_STEP:-}    # e.g. 2 (cuda): the per-op table of that step (left out of the medians)
CASE_TIMEOUT=${CASE_TIMEOUT:-560}
W=${W:-/tmp/seed-projection}
cases=("$@")
((${#cases[@]})) || cases=(first-offload middle-offload last-offload first-bf16 middle-bf16 last-bf16)
mkdir -p "$OUT" "$W"
# shellcheck disable=SC2054  # 12,10,10,10 is one argument
LAYOUT=(--tp 4 --sp --pp 4 --pp-layers 12,10,10,10 --ep 8 --etp 1 --dp 2)
# The seed's optimizer settings (its run line: adam, lr 1e-5 cosine to 1e-6, warm-up 0.1, wd 0.1, betas 0.9/0.98).
OPTIM=(--lr 1e-5 --min-lr 1e-6 --warmup-fraction 0.1 --weight-decay 0.1 --beta1 0.9 --beta2 0.98 --clip-grad 1.0)
OFFLOAD=(--optimizer-cpu-offload --optimizer-offload-fraction 0.7 --overlap-cpu-optimizer-d2h-h2d --use-precision-aware-optimizer)
BF16=(--exp-avg-dtype bf16 --exp-avg-sq-dtype bf16 --use-precision-aware-optimizer)
# bf16 moments alone leave the first stage 5.96 GiB over the H200 (quill plan, 2026-12-04): the smallest offload
# that fits with them is 0.10 (the plan's own suggestion), case *-bf16o.
BF16O=("${BF16[@]}" --optimizer-cpu-offload --optimizer-offload-fraction 0.1 --overlap-cpu-optimizer-d2h-h2d)
# bf16 moments, no offload, the first 4 layers of each stage recomputed: the fewest that fit stage 0 with room
# (quill plan: block 3 leaves 0.7 GiB, block 4 3.5 GiB; issue 40), case *-bf16r.
BF16R=("${BF16[@]}" --recompute-granularity full --recompute-method block --recompute-num-layers 4)
# bf16 moments, no offload, selective recompute of the experts' SwiGLU outputs and the norms' outputs (with the inputs
# gathered from them): stage 0 fits with 5.88 GiB free (quill plan, 2026-12-06), case *-bf16s.
BF16S=("${BF16[@]}" --recompute-granularity selective --recompute-modules moe_act layernorm)
# The same with two micro-batches' routed rows per experts' weight gradient (docs/decisions/expert-wgrad-pairs.md):
# stage 0 fits with 2.92 GiB free (quill plan at f44f8aa; 2.93 at dfc194e, the figure 3.53 noted before was stale), case *-bf16sp.
BF16SP=("${BF16S[@]}" --moe-expert-wgrad-micro-batches 2)
# On an 80 GB H100 (when no H200 comes): the whole optimizer state offloaded with bf16 moments, *-bf16f (stages
# 1-3 fit; stage 0 does not); and every layer recomputed with offload 0.7, *-bf16ru (every stage fits). Give
# DEVICE_MEMORY=140GiB to plan the layout's fit as on an H200 (quill train checks the whole layout's).
BF16F=("${BF16[@]}" --optimizer-cpu-offload --optimizer-offload-fraction 1.0 --overlap-cpu-optimizer-d2h-h2d)
# bf16 moments with the seed's offload 0.7, *-bf16h: the last stage fits an H100 (issue 40's first profile).
BF16H=("${BF16[@]}" --optimizer-cpu-offload --optimizer-offload-fraction 0.7 --overlap-cpu-optimizer-d2h-h2d)
BF16RU=("${BF16[@]}" --optimizer-cpu-offload --optimizer-offload-fraction 0.7 --overlap-cpu-optimizer-d2h-h2d
        --recompute-granularity full --recompute-method uniform --recompute-num-layers 1)
# The whole optimizer state offloaded and every layer recomputed, *-bf16fu: FP8's stages on 80 GB (its weight copies
# add ~13 GiB: bf16ru plans 83.9 GiB for FP8's stage 0, bf16fu 65.2; quill plan, 2026-12-07).
BF16FU=("${BF16[@]}" --optimizer-cpu-offload --optimizer-offload-fraction 1.0 --overlap-cpu-optimizer-d2h-h2d
        --recompute-granularity full --recompute-method uniform --recompute-num-layers 1)
# TRAIN_EXTRA: more quill train flags for every case (e.g. "--fp8-format e4m3 --fp8-recipe blockwise").
read -ra EXTRA <<< "${TRAIN_EXTRA:-}"
DEVICE_MEMORY_FLAG=()
[ -n "${DEVICE_MEMORY:-}" ] && DEVICE_MEMORY_FLAG=(--device-memory "$DEVICE_MEMORY")
{
[ "$DEVICE" = cuda ] && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
echo "quill $(cat "$B/COMMIT" 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || echo unknown); $(date -u +%FT%TZ)"
echo "model $CONFIG, random weights; layout ${LAYOUT[*]}; $GLOBAL_BATCH rows x $ROW_TOKENS tokens per step; $STEPS steps, warm-up $WARMUP"
if [ ! -f "$W/rows/manifest.json" ]; then
  "$Q" data synth --overwrite --conversations 6000 --row-tokens "$ROW_TOKENS" --max-rows 256 --out "$W/rows" > /dev/null || exit 1
fi
for c in "${cases[@]}"; do
  case $c in
    first-*) rank=0 ;; middle-*) rank=8 ;; last-*) rank=24 ;;
    *) echo "unknown case $c (first|middle|last)-(offload|bf16|bf16o|bf16r|bf16s|bf16sp|bf16f|bf16h|bf16ru|bf16fu)"; continue ;;
  esac
  case $c in *-offload) mem=("${OFFLOAD[@]}") ;; *-bf16o) mem=("${BF16O[@]}") ;; *-bf16r) mem=("${BF16R[@]}") ;; *-bf16s) mem=("${BF16S[@]}") ;; *-bf16sp) mem=("${BF16SP[@]}") ;;
    *-bf16f) mem=("${BF16F[@]}") ;; *-bf16h) mem=("${BF16H[@]}") ;; *-bf16ru) mem=("${BF16RU[@]}") ;; *-bf16fu) mem=("${BF16FU[@]}") ;; *-bf16) mem=("${BF16[@]}") ;;
    *) echo "unknown case $c: its memory setting (after first-, middle- or last-) is none of offload, bf16, bf16o,"\
         "bf16r, bf16s, bf16sp, bf16f, bf16h, bf16ru, bf16fu"; continue ;; esac
  d=$OUT/$c
  mkdir -p "$d"
  echo "== $c: world rank $rank, ${mem[*]}"
  # The plan first: what the rank needs, and whether quill train will refuse it (it checks the same plan).
  "$Q" plan --config "$CONFIG" --row-tokens "$ROW_TOKENS" --global-batch "$GLOBAL_BATCH" --device "$DEVICE" \
    "${LAYOUT[@]}" "${mem[@]}" "${DEVICE_MEMORY_FLAG[@]}" > "$d/plan.txt" 2>&1
  grep -E "^= device total|^fits|host: offloaded|does not fit" "$d/plan.txt"
  profile=()
  [ -n "$PROFILE_STEP" ] && profile=(--profile-step "$PROFILE_STEP")
  start=$(date +%s)
  timeout "$CASE_TIMEOUT" "$Q" train --config "$CONFIG" --rows "$W/rows" --seed 1 --steps "$STEPS" \
    --warmup-steps "$WARMUP" --global-batch "$GLOBAL_BATCH" "${OPTIM[@]}" "${LAYOUT[@]}" "${mem[@]}" \
    --device "$DEVICE" --simulate-rank "$rank" --simulate-routing balanced "${profile[@]}" "${DEVICE_MEMORY_FLAG[@]}" "${EXTRA[@]}" \
    --overwrite --out "$W/$c" < /dev/null > "$d/train.log" 2>&1
  rc=$?
  echo "$c: train rc $rc in $(( $(date +%s) - start )) s"
  for f in summary.json collectives.json metrics.jsonl projection.json op_profile_step"$PROFILE_STEP".txt \
           op_profile_step"$PROFILE_STEP".json; do
    [ -f "$W/$c/$f" ] && cp "$W/$c/$f" "$d/"
  done
  if [ $rc -ne 0 ]; then grep -E "error|refused|does not fit" "$d/train.log" | head -5; continue; fi
  python3 - "$d" "$GLOBAL_BATCH" <<'PY'
import json, sys
d, gb = sys.argv[1], int(sys.argv[2])
s = json.load(open(f"{d}/summary.json"))
c = json.load(open(f"{d}/collectives.json"))
dp = c["layout_spec"]["dp"]; m = gb // dp
steps = [p for p in s["per_step"] if p["step"] >= s["warmup_steps"] and p["step"] != s["profile_step"]] or s["per_step"]
# The loopback's copies stand in for collectives the projection models: compute is the passes less them.
loop = {}
for t in c.get("loopback_copy_s") or []:
    if t["phase"] == "passes": loop[t["step"]] = loop.get(t["step"], 0.0) + t["seconds"]
passes = sorted(p["passes_time_s"] - loop.get(p["step"], 0.0) for p in steps)[len(steps) // 2]
copies = sorted(loop.get(p["step"], 0.0) for p in steps)[len(steps) // 2]
step = sorted(p["step_time_s"] for p in steps)[len(steps) // 2]
rank = c["simulated_rank"]
peak = s["peak_device_bytes_per_rank"][rank]
rows = [r for r in c["ranks"][0]["rows"] if r["step"] == steps[-1]["step"]]
wire = {}
for r in rows:
    key = f'{r["phase"]} {r["group"]}({r["group_size"]}) {r["op"]}'
    wire[key] = wire.get(key, 0) + max(r["sent_bytes"], r["recv_bytes"])
print(f"rank {rank}: compute {1e3 * passes / m:.1f} ms per micro-batch (passes {passes:.2f} s of a {step:.2f} s step, "
      f"{m} micro-batches; loopback copies {1e3 * copies / m:.1f} ms per micro-batch taken off), peak {peak / 2**30:.2f} GiB (allocator), device in use at the end "
      f"{s.get('device_used_bytes_end', -1) / 2**30:.2f} GiB")
print(f"collective wire bytes per step: {sum(wire.values()) / 1e9:.3f} GB")
for k, v in sorted(wire.items(), key=lambda kv: -kv[1]):
    if v: print(f"  {k:<40} {v / 1e9:10.3f} GB")
PY
  sed -n '/^projection of/,$p' "$d/train.log"
done
} 2>&1 | tee -a "$OUT/seed-projection.txt"
