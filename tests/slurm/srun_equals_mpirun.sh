#!/usr/bin/env bash
# Issue 44: quill launched by Slurm's srun under PMIx equals the same run under mpirun. A one-node Slurm
# cluster (scripts/slurm/one-node-cluster.sh: slurmctld + slurmd + munge from Debian's slurm-wlm) is started
# in a private directory, a TP2+SP x DP2 run of the tiny TP model is launched both ways, and every step's
# loss and gradient norm and every checkpoint shard must be bit-identical (the same layout and rows: the same
# arithmetic whichever launcher placed the ranks). Then Slurm's own signal path: `scancel --signal=TERM` to the
# srun job after its second step stops every rank at a step boundary with a checkpoint and exit status 143,
# the printed command to continue starts with srun and loads the --save directory (its latest iteration), and
# the resumed run's last checkpoint (iter_0000012) equals the uninterrupted one byte for byte. Prints the wall time of each launch.
#   tests/slurm/srun_equals_mpirun.sh QUILL SOURCE_DIR WORK_DIR "MPIRUN [flags]"
# Exit 77 (CTest's skip) when slurm-wlm is not installed or not root: the daemons run as root.
set -uo pipefail
quill=${1:?quill binary}; src=${2:?source dir}; work=${3:?work dir}; mpirun=${4:-mpirun}
command -v slurmctld >/dev/null && command -v srun >/dev/null && command -v munged >/dev/null || {
  echo "slurm-wlm and munge are not installed (scripts/setup.sh installs them): skipped"; exit 77; }
[ "$(id -u)" = 0 ] || { echo "not root: the one-node cluster's daemons run as root: skipped"; exit 77; }
rm -rf "$work"; mkdir -p "$work"
cluster="$work/cluster"
trap 'bash "$src/scripts/slurm/one-node-cluster.sh" stop "$cluster"' EXIT
t0=$(date +%s.%N)
conf=$(bash "$src/scripts/slurm/one-node-cluster.sh" start "$cluster") || { echo "FAIL: the cluster did not start"; exit 1; }
export "${conf?}"
t1=$(date +%s.%N)
echo "cluster up in $(awk "BEGIN{print $t1 - $t0}") s ($SLURM_CONF)"
"$quill" data synth --conversations 300 --row-tokens 32 --max-rows 64 --out "$work/rows" >/dev/null || exit 1
train=(train --config "$src/tests/fixtures/configs/tiny-tp4.json" --rows "$work/rows" --seed 5 --steps 12 --global-batch 4
       --lr 1e-2 --weight-decay 0.1 --tensor-model-parallel-size 2 --sequence-parallel --dp 2 --quiet)
launch() {  # name, launcher words...
  local name=$1; shift
  local s; s=$(date +%s.%N)
  # shellcheck disable=SC2068
  timeout 120 $@ "$quill" "${train[@]}" --out "$work/$name" --save "$work/$name/checkpoint" </dev/null \
    > "$work/$name.log" 2>&1
  local rc=$?
  echo "$name: rc $rc in $(awk "BEGIN{print $(date +%s.%N) - $s}") s"
  [ $rc = 0 ] || { cat "$work/$name.log"; return 1; }
}
# shellcheck disable=SC2086
launch mpirun $mpirun -np 4 || exit 1
launch srun srun --mpi=pmix -n 4 --kill-on-bad-exit=1 || exit 1
fail=0
python3 - "$work/mpirun/metrics.jsonl" "$work/srun/metrics.jsonl" <<'PY' || fail=1
import json, sys
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
assert len(a) == len(b) == 12, f"steps: mpirun {len(a)}, srun {len(b)}"
for x, y in zip(a, b):
    print(f"step {x['step']}: loss mpirun {x['loss']!r} srun {y['loss']!r}; grad norm {x['grad_norm']!r} {y['grad_norm']!r}")
    assert (x["loss"], x["grad_norm"], x["expert_tokens"]) == (y["loss"], y["grad_norm"], y["expert_tokens"]), "differs"
PY
# --save DIR keeps iterations as Megatron does: the run's end is DIR/iter_0000012, named by the latest file.
last=checkpoint/iter_0000012
for run in mpirun srun; do
  [ "$(cat "$work/$run/checkpoint/latest_checkpointed_iteration.txt" 2>/dev/null)" = 12 ] ||
    { echo "FAIL: $run/checkpoint/latest_checkpointed_iteration.txt does not name iteration 12"; fail=1; }
done
shards=0
for f in "$work/mpirun/$last"/*.safetensors; do
  [ -f "$f" ] || continue
  cmp "$f" "$work/srun/$last/$(basename "$f")" || fail=1
  shards=$((shards + 1))
done
[ "$shards" = 4 ] || { echo "FAIL: $shards checkpoint shards, expected 4"; fail=1; }
# SIGTERM from Slurm, as at a time limit (--signal=TERM@...) or on preemption: to the job's tasks, not to srun.
start=$(date +%s.%N)
srun --mpi=pmix -n 4 --kill-on-bad-exit=1 --job-name=quill-sigterm -- "$quill" "${train[@]}" --out "$work/stopped" \
  --save "$work/stopped/checkpoint" </dev/null > "$work/stopped.log" 2>&1 &
srun_pid=$!
for _ in $(seq 600); do  # until two steps are in the metrics (at most 60 s)
  [ -f "$work/stopped/metrics.jsonl" ] && [ "$(wc -l < "$work/stopped/metrics.jsonl")" -ge 2 ] && break
  sleep 0.1
done
scancel --signal=TERM --name=quill-sigterm
wait $srun_pid; rc=$?
steps=$(wc -l < "$work/stopped/metrics.jsonl")
echo "stopped: srun rc $rc after $steps of 12 steps in $(awk "BEGIN{print $(date +%s.%N) - $start}") s"
cat "$work/stopped.log"
[ "$rc" = 143 ] || { echo "FAIL: srun's status $rc, expected 143 (SIGTERM)"; fail=1; }
[ "$steps" -lt 12 ] || { echo "FAIL: the run ended before the signal reached it"; fail=1; }
continue_line=$(grep -A1 "Continue with:" "$work/stopped.log" | tail -1 | sed 's/^ *//')
case "$continue_line" in
  srun\ *) ;;
  *) echo "FAIL: the command to continue does not start with srun: '$continue_line'"; fail=1 ;;
esac
# The printed command continues the run (under this test's srun flags); its checkpoint equals the uninterrupted one.
eval "timeout 120 srun --mpi=pmix -n 4 --kill-on-bad-exit=1 -- ${continue_line#srun }" </dev/null > "$work/resumed.log" 2>&1 \
  || { echo "FAIL: the resumed run failed"; cat "$work/resumed.log"; fail=1; }
case "$continue_line" in
  *"--load $work/stopped/checkpoint"*) ;;
  *) echo "FAIL: the command to continue does not --load the --save directory: '$continue_line'"; fail=1 ;;
esac
[ "$(cat "$work/stopped/checkpoint/latest_checkpointed_iteration.txt" 2>/dev/null)" = 12 ] ||
  { echo "FAIL: the resumed run's latest checkpoint is not iteration 12"; fail=1; }
resumed=0
for f in "$work/mpirun/$last"/*.safetensors; do
  [ -f "$f" ] || continue
  cmp "$f" "$work/stopped/$last/$(basename "$f")" || { echo "FAIL: resumed $(basename "$f") differs"; fail=1; }
  resumed=$((resumed + 1))
done
[ "$resumed" = 4 ] || { echo "FAIL: $resumed resumed shards compared, expected 4"; fail=1; }
echo "srun under PMIx against mpirun: $([ $fail = 0 ] && echo "bit-identical (losses, gradient norms, expert counts, $shards shards); SIGTERM by scancel stopped at step $steps, resumed to the same bytes" || echo FAIL); whole test $(awk "BEGIN{print $(date +%s.%N) - $t0}") s"
exit $fail
