#!/usr/bin/env bash
# quill tune's ranking against real timed runs on the CPU (docs/tune.md): tests/fixtures/configs/tiny-tp4.json
# on 8 MPI ranks of this machine.
#   1. The CPU's rates, measured here: one rank trains the same rows alone; its median passes time over the
#      model's FLOPs gives one GEMM/attention rate, its optimizer time over the model's AdamW bytes one memory
#      rate (both measured with every rate set to 1, then scaled); 8 ranks share the machine's cores, so each
#      rank gets cores/8 of that rate. The MPI figures: bench/results/2026-12-02-comm-model-cpu (2.49 us,
#      6.961 GB/s), every rank on one "node".
#   2. quill tune --gpu cpu ranks every layout of 8 ranks; the five best distinct layouts (fp32 moments, no
#      offload; PICK=spread: five spaced evenly over the whole ranking of those, best and worst included) run
#      for real under mpirun -np 8, REPEATS times each, in turn; the median step (warm-up steps left out) of
#      each run is taken.
#   3. Spearman's rank correlation of projected against measured, per repeat and on the medians, and each
#      layout's spread over the repeats.
# A benchmark, not a test: wall times on a shared 2-core machine are noisy (8 ranks on 2 cores wait for each
# other's time slices at every blocking call).
#   [PICK=top|spread] [REPEATS=3] [STEPS=10] [Q=quill] [CORES=N] [COMM_FLAGS=...] scripts/tune-cpu-check.sh [OUT_DIR]
#   (default runs/tune-cpu). On the GPU machine's 16-core host (one core or more per rank): pending-checks.sh's
#   tunecpu part.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-runs/tune-cpu}
q=${Q:-build/quill}
ranks=8
cores=${CORES:-$(nproc)}
mpirun_cmd="mpirun -np $ranks"
if mpirun --version 2>/dev/null | grep -q "Open MPI"; then mpirun_cmd="mpirun --oversubscribe --allow-run-as-root -np $ranks"; fi
steps=${STEPS:-10} warmup=${WARMUP:-2} batch=${BATCH:-8} row=${ROW_TOKENS:-256} repeats=${REPEATS:-3} top=${TOP:-5}
pick=${PICK:-top}  # top: the five best; spread: five spaced evenly over the whole ranking (best and worst included)
config=tests/fixtures/configs/tiny-tp4.json
rm -rf "$out" && mkdir -p "$out"
$q data synth --conversations 400 --row-tokens "$row" --max-rows 64 --out "$out/rows" >/dev/null
flags="--config $config --rows $out/rows --seed 5 --steps $steps --warmup-steps $warmup --global-batch $batch --lr 1e-3 --quiet"
# The MPI figures: this machine's, from bench/comm_probe (COMM_FLAGS: its last line's flags; default the 2-core
# development VM's of bench/results/2026-12-02-comm-model-cpu).
comm="--gpus-per-node $ranks ${COMM_FLAGS:---nvlink-busbw-gbps 6.961 --nvlink-latency-us 2.49}"
tune="$q tune --model $config --gpu cpu --gpus $ranks --row-tokens $row --global-batch $batch --device-memory 4GiB $comm"

# 1. The rates: one rank alone, against the model at unit rates.
timeout 600 $q train $flags --out "$out/one" </dev/null >"$out/one.log" 2>&1
cat >"$out/unit.json" <<'EOF'
{"dense_gemm_tflops": 1, "grouped_gemm_tflops": 1, "attention_global_fwd_tflops": 1, "attention_global_bwd_tflops": 1,
 "attention_local_fwd_tflops": 1, "attention_local_bwd_tflops": 1, "loss_gbps": 1e9, "region_ms_per_row_layer": 0,
 "split_ms_per_row_layer": 0, "gaps_ms_per_row_layer": 0, "adamw_gbps": 1, "sum_squares_gbps": 1, "host_adamw_gelements_per_s": 1,
 "pcie_gbps": 1, "source": "unit rates"}
EOF
$q tune --model $config --gpu cpu --gpus 1 --row-tokens $row --global-batch $batch --device-memory 4GiB \
  --compute-rates "$out/unit.json" --json >"$out/unit-tune.json"
python3 - "$out" "$warmup" "$ranks" "$cores" <<'PY'
import json, statistics, sys
out, warmup, ranks, cores = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
lines = json.load(open(f"{out}/one/summary.json"))["per_step"][warmup:]
passes = statistics.median(l["passes_time_s"] for l in lines)
rest = statistics.median(l["step_time_s"] - l["passes_time_s"] for l in lines)
unit = [r for r in json.load(open(f"{out}/unit-tune.json"))["ranked"] if not r["bf16_moments"]][0]
batch = json.load(open(f"{out}/unit-tune.json"))["global_batch"]
st = unit["stages"][0]
flops_s = batch * (st["forward_s"] + st["backward_s"])  # seconds at 1 TFLOP/s = TFLOPs per step
bytes_s = st["optimizer_s"]                            # seconds at 1 GB/s = GB per step
share = min(1.0, cores / ranks)
tflops = flops_s / passes * share
gbps = bytes_s / rest * share
rates = {k: tflops for k in ["dense_gemm_tflops", "grouped_gemm_tflops", "attention_global_fwd_tflops",
                             "attention_global_bwd_tflops", "attention_local_fwd_tflops", "attention_local_bwd_tflops"]}
rates.update({"loss_gbps": 1e9, "region_ms_per_row_layer": 0, "split_ms_per_row_layer": 0, "gaps_ms_per_row_layer": 0,
              "adamw_gbps": gbps, "sum_squares_gbps": gbps, "host_adamw_gelements_per_s": gbps / 30, "pcie_gbps": 1e3})
rates["source"] = (f"measured on this machine: one rank's median passes {passes*1e3:.1f} ms for {flops_s*1e3:.3f} GFLOP "
                   f"({flops_s/passes*1e3:.2f} GFLOP/s), optimizer {rest*1e3:.2f} ms for {bytes_s:.4f} GB "
                   f"({bytes_s/rest:.2f} GB/s); x {share:.3g} ({cores} cores over {ranks} ranks)")
json.dump(rates, open(f"{out}/cpu-rates.json", "w"), indent=1)
print("CPU rates:", rates["source"])
PY

# 2. The ranking, and the real runs of its best distinct layouts.
$tune --compute-rates "$out/cpu-rates.json" --top 20 >"$out/tune.txt"
$tune --compute-rates "$out/cpu-rates.json" --json >"$out/tune.json"
python3 - "$out" "$top" "$pick" <<'PY' >"$out/layouts.txt"
import json, sys
out, top, pick = sys.argv[1], int(sys.argv[2]), sys.argv[3]
seen, picked = set(), []
for r in json.load(open(f"{out}/tune.json"))["ranked"]:
    if r["bf16_moments"] or r["offload_fraction"] > 0 or r["layout"] in seen: continue
    seen.add(r["layout"])
    f = f"--tp {r['tp']} --pp {r['pp']} --dp {r['dp']} --ep {r['ep']}"
    if r["sp"]: f += " --sp"
    if r["pp_layers"]: f += " --pp-layers " + ",".join(map(str, r["pp_layers"]))
    picked.append(f"{r['rank']}|{r['step_s']}|{f}")
if pick == "spread":
    n = len(picked)
    picked = [picked[round(i * (n - 1) / (top - 1))] for i in range(top)]
print("\n".join(picked[:top]))
PY
cat "$out/layouts.txt"
for rep in $(seq 1 "$repeats"); do
  i=0
  while IFS='|' read -r rank proj layout; do
    i=$((i + 1))
    timeout 900 $mpirun_cmd $q train $flags $layout --out "$out/r$rep-l$i" </dev/null >"$out/r$rep-l$i.log" 2>&1
    echo "repeat $rep layout $i ($layout): $(python3 -c "import json;print(json.load(open('$out/r$rep-l$i/summary.json'))['median_step_s'])") s"
  done <"$out/layouts.txt"
done | tee "$out/runs.txt"

# 3. Rank correlation and spread.
python3 - "$out" "$repeats" <<'PY' | tee "$out/table.txt"
import json, statistics, sys
out, repeats = sys.argv[1], int(sys.argv[2])
rows = [l.rstrip("\n").split("|") for l in open(f"{out}/layouts.txt") if l.strip()]
def ranks(xs):
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    r = [0] * len(xs)
    for k, i in enumerate(order): r[i] = k + 1
    return r
def spearman(a, b):
    ra, rb, n = ranks(a), ranks(b), len(a)
    return 1 - 6 * sum((x - y) ** 2 for x, y in zip(ra, rb)) / (n * (n * n - 1))
proj = [float(r[1]) for r in rows]
real = [[json.load(open(f"{out}/r{k}-l{i+1}/summary.json"))["median_step_s"] for k in range(1, repeats + 1)]
        for i in range(len(rows))]
med = [statistics.median(x) for x in real]
print(f"{'tune rank':>9}  {'layout':<46} {'projected ms':>12} " + " ".join(f"{'run '+str(k)+' ms':>10}" for k in range(1, repeats + 1)) + f" {'spread %':>9}")
for (rank, p, layout), x in zip(rows, real):
    spread = 100 * (max(x) - min(x)) / statistics.median(x)
    print(f"{rank:>9}  {layout:<46} {1e3*float(p):12.2f} " + " ".join(f"{1e3*v:10.2f}" for v in x) + f" {spread:9.1f}")
for k in range(repeats):
    print(f"Spearman rank correlation, projected vs run {k+1}: {spearman(proj, [x[k] for x in real]):.3f}")
print(f"Spearman rank correlation, projected vs the runs' medians: {spearman(proj, med):.3f}")
PY
