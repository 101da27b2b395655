#!/usr/bin/env bash
# One device call (~9 minutes) for the GPU checks still open on one H200, each part with its own time limit and
# skipped when the call's budget (BUDGET_S, default 540 s) would run out (PARTS picks them):
#   tests:   all of cuda_tests;
#   grouped: the routed-expert GEMM rate at 1,536 / 768 / 384 / 192 / 96 rows per expert (grouped_bench);
#   noise:   EP on the slice: the bf16 noise floor of its config, rows and steps (ep-check.sh PARTS="noise", issue 17);
#   replay:  EP2 x DP2 against one process, free and with the routing replayed (ep-replay-check.sh, issue 17);
#   initgemm: compute-sanitizer initcheck on CudaShortConv.ReadsWhatAGemmWrote and the GEMM tests (issue 24);
#   overlap: what the offload's overlap hides: f0.7 and f0.7o alternated in the same call (offload-check.sh, issue 19);
#   seedbf16: the seed layout's stages with bf16 moments and the smallest offload that fits, 0.1 (seed-projection.sh
#            SEED_CASES, default first-bf16o middle-bf16o; bf16 moments alone do not fit the first stage, issue 21);
#   tok:     the tokenizer and data build cold and warm against tiktoken (tokenizer-cold-warm.sh; carry build/gpu-tok too,
#            issue 15);
#   tunecpu: quill tune's ranking against real runs of 8 CPU ranks on the 16-core host (tune-cpu-check.sh with the
#            host's MPI figures from comm_probe; issue 22, must-show 3);
#   tune1:   quill tune --measure's first candidate, its three stage roles (tune-measure.sh 1, issue 22);
#   startup: the seed rank 0's parameter table made and filled (param_init_bench; bundle it too).
# Here first: cmake --build build -j2 && scripts/gpu-bundle.sh build build/gpu-bundle cuda_tests attention_bench grouped_bench
#             cpu_adamw_bench comm_probe param_init_bench && git describe --always --dirty > build/gpu-bundle/COMMIT
# Then: run(carry=["build/gpu-bundle"], command="PARTS='overlap replay' bash scripts/gpu/pending-checks.sh; cd $OUT &&
#       tar czf /tmp/a.tgz . && find . -mindepth 1 -delete && mv /tmp/a.tgz pending.tgz")
# Environment [defaults]: OUT [/tmp/out]  BUDGET_S [540]  PARTS [tests grouped noise replay overlap]
set -uo pipefail
OUT=${OUT:-/tmp/out}
B=$PWD/build/gpu-bundle
export LD_LIBRARY_PATH=$B/lib:${LD_LIBRARY_PATH:-} NCCL_NVLS_ENABLE=0
PARTS=${PARTS:-tests grouped noise replay overlap}
T0=$(date +%s)
mkdir -p "$OUT"
has() { [[ " $PARTS " == *" $1 "* ]]; }
left() { echo $(( ${BUDGET_S:-540} - ($(date +%s) - T0) )); }
# part NAME NEEDED_S COMMAND...: runs COMMAND when NEEDED_S seconds are left, else says it was skipped.
part() {
  local name=$1 need=$2
  shift 2
  has "$name" || return 0
  if (( $(left) < need )); then echo "== $name: skipped ($(left) s left, needs $need)"; return 0; fi
  echo "== $name ($(date +%T), $(left) s left)"
  timeout $(( $(left) - 10 )) "$@"
  echo "== $name rc $?"
}
{
echo "quill $(cat "$B/COMMIT"); $(date -u +%FT%TZ)"
part tests 80 bash -c "'$B/bin/cuda_tests' --gtest_brief=1 > '$OUT/cuda_tests.log' 2>&1; echo rc \$?;
  grep -E '^\[  (PASSED|FAILED|SKIPPED) ' '$OUT/cuda_tests.log' | head -12"
grouped_rates() {  # experts x rows per expert, the same 49,152 rows in all but the last two
  for er in 32x1536 64x768 128x384 32x384 64x192 32x96; do
    echo "-- ${er%x*} experts x ${er#*x} rows"
    "$B/bin/grouped_bench" $(yes "${er#*x}" | head -n "${er%x*}") | grep -v "^ "
  done
}
[ -x "$B/bin/grouped_bench" ] && part grouped 40 bash -c "$(declare -f grouped_rates); B='$B' grouped_rates"
part noise 130 env OUT="$OUT/noise" CONFIG=configs/slice.json PARTS="noise" T1=75 bash scripts/gpu/ep-check.sh
init_gemm() {  # initcheck on a short convolution of what a cuBLASLt GEMM wrote (nothing else writes its input)
  local cs; cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
  [ -n "$cs" ] || { echo "compute-sanitizer: not on this machine"; return 0; }
  "$cs" --tool initcheck --print-limit 2000 "$B/bin/cuda_tests" --gtest_brief=1 \
    --gtest_filter='CudaShortConv.ReadsWhatAGemmWrote:LinearCuda.*' > "$OUT/initcheck-gemm.log" 2>&1
  echo "initcheck rc $?"; grep -E "^=========     at " "$OUT/initcheck-gemm.log" | sed 's/(.*//' | sort | uniq -c | sort -rn | head
  grep -E "ERROR SUMMARY|PASSED|FAILED|uninitialized" "$OUT/initcheck-gemm.log" | sort | uniq -c | head
}
# initcheck took 389 s on these 8 tests (2026-12-05), and what it showed is settled (docs/determinism.md): run it again only
# with a reason.
part initgemm 420 bash -c "$(declare -f init_gemm); B='$B' OUT='$OUT' init_gemm"
# A B B A (OVERLAP_RUNS): the host's speed drifts within a call, so one pair in one order cannot tell the flag's effect.
OVERLAP_RUNS=${OVERLAP_RUNS:-"f0.7 f0.7o f0.7o:2 f0.7:2"}
part overlap $(( 85 * $(wc -w <<< "$OVERLAP_RUNS") )) env OUT="$OUT/overlap" RUNS="$OVERLAP_RUNS" TESTS=0 BENCH=0 \
  bash scripts/gpu/offload-check.sh
part replay ${REPLAY_NEED:-280} env OUT="$OUT/replay" T=${REPLAY_T:-150} bash scripts/gpu/ep-replay-check.sh
# SEED_CASE_TIMEOUT: 150 s suits the bf16-moment cases (offload 0.1: ~70 s of start-up); the offload-0.7 cases spend
# 125-142 s before their first step (98 GiB of pinned host state; bench/results/2026-12-05-h200-checks): give them 220.
part seedbf16 290 env OUT="$OUT/seedbf16" GLOBAL_BATCH=16 STEPS=2 WARMUP=1 CASE_TIMEOUT=${SEED_CASE_TIMEOUT:-150} \
  bash scripts/gpu/seed-projection.sh ${SEED_CASES:-first-bf16o middle-bf16o}
[ -d build/gpu-tok ] && part tok 230 env OUT="$OUT/tok" bash scripts/gpu/tokenizer-cold-warm.sh --reps 3
tune_cpu() {  # the host's MPI figures first (8 ranks), then both picks of scripts/tune-cpu-check.sh
  mpirun --allow-run-as-root --oversubscribe --bind-to none -np 8 "$B/bin/comm_probe" < /dev/null > "$OUT/tune-cpu-probe.txt" 2>&1
  local flags; flags=$(grep -o -- "--nvlink-latency-us .*" "$OUT/tune-cpu-probe.txt")
  tail -1 "$OUT/tune-cpu-probe.txt"
  for pick in top spread; do
    PICK=$pick Q="$B/bin/quill" CORES=$(nproc) COMM_FLAGS="$flags" bash scripts/tune-cpu-check.sh "$OUT/tune-cpu-$pick" \
      > "$OUT/tune-cpu-$pick.log" 2>&1
    echo "$pick rc $?"; tail -4 "$OUT/tune-cpu-$pick/table.txt"
    rm -rf "$OUT/tune-cpu-$pick/rows"
  done
}
[ -x "$B/bin/comm_probe" ] && part tunecpu 200 bash -c "$(declare -f tune_cpu); B='$B' OUT='$OUT' tune_cpu"
part tune1 450 env OUT="$OUT" RUN_TIMEOUT=145 bash scripts/gpu/tune-measure.sh 1
# startup: the seed's rank 0 table made and filled on this host (param_init_bench: for_config + init_random, 8.63 G
# values; 55-66 s inside "random weights (host)" before 2026-12-05's zero pages), then one seed case's start-up note.
[ -x "$B/bin/param_init_bench" ] && part startup 60 bash -c "/usr/bin/time -f '%e s wall, %M KB max RSS' \
  '$B/bin/param_init_bench' tests/fixtures/configs/inkling-small-hf.json 4 8 2 4 12,10,10,10"
echo "done at +$(( $(date +%s) - T0 )) s"
} 2>&1 | tee "$OUT/pending-checks.txt"
