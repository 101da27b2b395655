#!/usr/bin/env bash
# The projection of a simulated rank against the real run, on the CPU (docs/comm-model.md): for TP2+SP,
# DP2, PP2 and EP2 x DP2 of tests/fixtures/configs/tiny-tp4.json, the real run under mpirun -np 2, each
# stage's rank simulated alone, and `quill project` with the MPI bandwidth and latency that
# bench/comm_probe measures here (shared memory: every rank on one "node"); ranks 0 and 1 are simulated at
# the same time, as the real ranks run (run it on an otherwise idle machine: with more runnable processes
# than cores, every blocking MPI call of a real run waits for its peer's next time slice). Prints, per layout, the real
# median step time, the projected step and their ratio (goal: within 15%). A benchmark, not a test:
# times on a shared 2-core machine are noisy; the byte equality is CTest's (tests/cli/simulate_rank_test.cc).
#   scripts/comm-model-cpu-check.sh [OUT_DIR]     (default runs/comm-model-cpu; needs build/ with comm_probe)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-runs/comm-model-cpu}
q=build/quill
mpirun_cmd="mpirun -np 2"
if mpirun --version 2>/dev/null | grep -q "Open MPI"; then mpirun_cmd="mpirun --oversubscribe --allow-run-as-root -np 2"; fi
rm -rf "$out" && mkdir -p "$out"
steps=${STEPS:-12} warmup=${WARMUP:-2} batch=${BATCH:-8} row=${ROW_TOKENS:-256}
$q data synth --conversations 400 --row-tokens "$row" --max-rows 64 --out "$out/rows" >/dev/null
timeout 300 $mpirun_cmd build/tests/comm_probe </dev/null | tee "$out/probe.txt"
params=$(tail -1 "$out/probe.txt" | sed 's/.*one node): //')
flags="--config tests/fixtures/configs/tiny-tp4.json --rows $out/rows --seed 5 --steps $steps --warmup-steps $warmup \
  --global-batch $batch --lr 1e-3 --quiet"
printf '%-6s %-28s %12s %12s %8s\n' layout flags real_ms projected_ms ratio | tee "$out/table.txt"
check() {
  local name=$1 layout=$2 sims=$3 routing=${4:-}
  timeout 600 $mpirun_cmd $q train $flags $layout --out "$out/$name-real" </dev/null >"$out/$name-real.log" 2>&1
  # Ranks 0 and 1 simulated at the same time, as the real run's two ranks compute at the same time (the
  # same share of the machine's cores and memory bandwidth); the projection takes one rank per stage.
  local dirs="" pids=""
  for r in 0 1; do
    local extra=""
    [ -n "$routing" ] && extra="--simulate-routing $out/$name-real/metrics.jsonl"
    timeout 600 $q train $flags $layout --simulate-rank "$r" $extra --out "$out/$name-sim$r" >"$out/$name-sim$r.log" 2>&1 &
    pids="$pids $!"
  done
  for p in $pids; do wait "$p"; done
  for r in $sims; do dirs="$dirs $out/$name-sim$r"; done
  $q project $dirs --gpus-per-node 2 $params --out "$out/$name-proj" >"$out/$name-proj.txt"
  python3 - "$name" "$layout" "$out/$name-real/summary.json" "$out/$name-proj/projection.json" <<'PY' | tee -a "$out/table.txt"
import json, sys
name, layout, real, proj = sys.argv[1:]
r = json.load(open(real))["median_step_s"]
p = json.load(open(proj))["step_s"]
print(f"{name:<6} {layout:<28} {1e3*r:12.2f} {1e3*p:12.2f} {p/r:8.3f}{'' if abs(p/r-1) <= 0.15 else '  (outside 15%)'}")
PY
}
check tp2 "--tp 2 --sp" "0"
check dp2 "--dp 2" "0"
check pp2 "--pp 2 --pp-layers 1,3" "0 1"
check ep2 "--ep 2 --dp 2" "0" recorded
echo "model parameters: $params (bench/comm_probe on this machine)" | tee -a "$out/table.txt"
