#!/usr/bin/env bash
# Issue 44: SIGTERM at a random moment, N times per layout, under DP2 and PP2 on CPU ranks (mpirun -np 2):
# each time to mpirun or to one rank's process only (chosen at random), once the metrics show a random
# number of steps, after a random part of a step. A stopped run must exit non-zero and print the command that continues it;
# that command (behind this machine's mpirun) must finish the run; the finished run's metrics (loss and
# grad norm of every step) and its checkpoint files (every shard and state.json) must equal the
# uninterrupted run's, bit for bit. Too slow for CTest (tests/cli/stop_signal_test.cc covers each case
# once); run it after changing the training loop, the checkpoint or the signal handling.
#
# Usage: Q=build/quill [N=10] [STEPS=40] [TARGETS="mpirun rank"] [MPIRUN="mpirun --oversubscribe --allow-run-as-root"] \
#          scripts/signal-resume-check.sh OUT
# A SIGTERM to mpirun reaches the ranks seconds later (docs/run-directory.md): with short runs most such trials
# complete first, and are counted apart. TARGETS=mpirun STEPS=600 makes them stop (at ~35 ms a step).
set -euo pipefail
out=${1:?usage: scripts/signal-resume-check.sh OUT}
Q=$(realpath "${Q:-build/quill}")
N=${N:-10}
STEPS=${STEPS:-40}
# Open MPI's mpirun sends SIGKILL 1 s after it passes a SIGTERM on, unless told to wait longer.
MPIRUN=${MPIRUN:-mpirun --oversubscribe --allow-run-as-root --mca odls_base_sigkill_timeout 10}
src=$(cd "$(dirname "$0")/.." && pwd)
rm -rf "$out" && mkdir -p "$out"
"$Q" data synth --conversations 200 --row-tokens 64 --out "$out/rows" > /dev/null

train() {  # train OUT LAYOUT...: the command line's words after the launcher
  local dir=$1; shift
  echo "$Q" train --config "$src/configs/tiny.json" --rows "$out/rows" --seed 3 --global-batch 4 --lr 1e-2 \
    --min-lr 1e-3 --quiet --steps "$STEPS" --out "$dir" --save "$dir/checkpoint" "$@"
}

# The metrics' loss and grad norm per step, one line each: two runs compare with cmp.
numbers() { python3 -c 'import json,sys
for l in open(sys.argv[1]): j=json.loads(l); print(j["step"], repr(j["loss"]), repr(j["grad_norm"]))' "$1/metrics.jsonl"; }

# The checkpoint directory RUN/checkpoint/latest_checkpointed_iteration.txt names (RUN/checkpoint/iter_NNNNNNN).
latest() { echo "$1/checkpoint/iter_$(printf %07d "$(cat "$1/checkpoint/latest_checkpointed_iteration.txt" 2>/dev/null)")"; }

same_as_reference() {  # same_as_reference RUN REF
  cmp -s <(numbers "$1") <(numbers "$2") || { echo "metrics differ"; return 1; }
  for f in "$(latest "$2")"/*; do cmp -s "$f" "$(latest "$1")/$(basename "$f")" || { echo "$(basename "$f") differs"; return 1; }; done
}

passed=0 total=0 continued=0
for layout in "--dp 2" "--pp 2"; do
  tag=${layout// /}; tag=${tag#--}
  ref=$out/$tag-ref
  start=$(date +%s.%N)
  $MPIRUN -np 2 $(train "$ref" $layout) < /dev/null > "$ref.log" 2>&1
  wall=$(echo "$(date +%s.%N) - $start" | bc)
  echo "$tag: uninterrupted run of $STEPS steps: ${wall} s"
  for i in $(seq 1 "$N"); do
    total=$((total + 1))
    run=$out/$tag-$i
    # The moment: once metrics.jsonl shows a random number of steps (1 to STEPS-5), then a random part
    # of a step; a wall-clock delay alone often fell after the end when the machine's load changed.
    at_step=$(python3 -c "import random; print(random.randint(1, $STEPS - 5))")
    delay=$(python3 -c "import random; print(round(random.uniform(0, 0.2), 2))")
    target=$(python3 -c "import random; print(random.choice('${TARGETS:-mpirun rank}'.split()))")
    $MPIRUN -np 2 $(train "$run" $layout) < /dev/null > "$run.log" 2>&1 &
    mpirun_pid=$!
    until [ "$(cat "$run/metrics.jsonl" 2>/dev/null | wc -l)" -ge "$at_step" ] || ! kill -0 "$mpirun_pid" 2>/dev/null; do
      sleep 0.02
    done
    sleep "$delay"
    delay="step $at_step + ${delay}"
    if [ "$target" = mpirun ]; then
      kill -TERM "$mpirun_pid" 2>/dev/null || true
    else
      ranks=$(pgrep -P "$mpirun_pid" || true)
      victim=$(echo "$ranks" | shuf -n 1)
      [ -n "$victim" ] && kill -TERM "$victim" 2>/dev/null || true
    fi
    status=0; wait "$mpirun_pid" || status=$?
    what="$tag trial $i: SIGTERM to $target at ${delay} s: exit $status"
    # Complete: every step trained and the final checkpoint written (mpirun exits 1 when it was signalled,
    # even when the ranks had finished before the signal reached them).
    if [ "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["next_step"])' "$(latest "$run")/state.json" 2>/dev/null)" = "$STEPS" ] &&
       ! grep -q "Continue with:" "$run.log"; then
      what+=", the run had completed"
    elif grep -q "Continue with:" "$run.log"; then
      stopped=$(grep -o "stopped after [0-9]* of [0-9]* steps" "$run.log" | head -1)
      command=$(grep -A1 "Continue with:" "$run.log" | tail -1 | sed 's/^  mpirun -np 2 //')
      what+=", $stopped"
      if ! eval "$MPIRUN -np 2 $command" < /dev/null >> "$run.log" 2>&1; then
        echo "$what; the printed command failed (see $run.log)"; continue
      fi
      what+=", continued"; continued=$((continued + 1))
    elif grep -q "no step was trained and nothing was written" "$run.log"; then
      what+=", stopped before its first step; started again"
      $MPIRUN -np 2 $(train "$run" $layout) < /dev/null >> "$run.log" 2>&1 || { echo "$what: failed"; continue; }
    else
      echo "$what: FAILED: no continuation printed (see $run.log)"; continue
    fi
    if diff=$(same_as_reference "$run" "$ref"); then
      passed=$((passed + 1)); echo "$what: bit-identical"
    else
      echo "$what: FAILED: $diff"
    fi
  done
done
echo "signal-resume-check: $passed of $total bit-identical ($continued stopped by the signal and continued, the rest completed or stopped before their first step)"
[ "$passed" = "$total" ]
