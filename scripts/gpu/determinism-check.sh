#!/usr/bin/env bash
# One device call (issue 24): is GPU training bit-reproducible? Every CUDA op test (the kernels whose
# float atomics became ordered reductions), then the slice (configs/slice.json, random init --seed 11,
# 8,192-token rows, 4 steps of 2 rows, --lr 1e-4 --clip-grad 1.0) trained RUNS times (default 3) with an
# HF export each; prints every step's loss and gradient norm per run, whether they are bit-identical,
# and the sha256 of each export (all its files, in name order) and of each run's per-expert counts.
# compute-sanitizer racecheck/initcheck on the tiny config when the machine has the tool.
# Here first: cmake --build build -j2 && scripts/gpu-bundle.sh build build/gpu-bundle cuda_tests attention_bench
# Then: run(carry=["build/gpu-bundle"], command="bash scripts/gpu/determinism-check.sh")
# Environment [defaults]: OUT [/tmp/out]  RUNS [3]  TESTS [1]  TEST_FILTER [*]  SANITIZER [1]
#   SAN_TOOLS [racecheck initcheck]  SAN_CONFIG [configs/tiny.json]  SAN_T [120 s per tool]  SAN_TESTS [""]: a gtest filter of
#   cuda_tests to run under initcheck (e.g. "CudaSwiglu*:CudaShortConv*:LinearCuda.*")  DP [0]: also DP2 on the one GPU (MPI-staged), run twice, compared  ATTN_BENCH [1]: attention_bench
#   (when bundled), once  THEN [""]: a command run
#   afterwards in the same call (e.g. "PARTS='one tp2' bash scripts/gpu/tp-check.sh")
set -uo pipefail
OUT=${OUT:-/tmp/out}
B=$PWD/build/gpu-bundle
export LD_LIBRARY_PATH=$B/lib:${LD_LIBRARY_PATH:-} NCCL_NVLS_ENABLE=0
Q=$B/bin/quill
RUNS=${RUNS:-3}
mkdir -p "$OUT"
{
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
echo "quill $(cat "$B/COMMIT"); $(date -u +%FT%TZ)"
if [ "${TESTS:-1}" = 1 ]; then
  date +%T; timeout 240 "$B/bin/cuda_tests" --gtest_brief=1 --gtest_filter="${TEST_FILTER:-*}" > "$OUT/cuda_tests.log" 2>&1
  echo "cuda_tests rc $?"; grep -E -A6 "PASSED|FAILED|Failure|tests ran" "$OUT/cuda_tests.log" | head -${TEST_LINES:-20}
fi
if [ -x "$B/bin/attention_bench" ] && [ "${ATTN_BENCH:-1}" = 1 ]; then
  # The attention kernels as the ops route them (the fixed-order dQ additions' cost was measured in
  # bench/results/2026-12-04-determinism-cost; the arrival-order knob is now quill train's --attention-dq-order).
  timeout 60 "$B/bin/attention_bench" --no-wgmma 2>&1 | tail -2
fi
"$Q" data synth --overwrite --conversations 400 --row-tokens 8192 --out /tmp/rows8192 > /dev/null
if [ "${SANITIZER:-1}" = 1 ]; then
  cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
  if [ -n "$cs" ]; then
    "$Q" data synth --overwrite --conversations 200 --row-tokens 128 --out /tmp/rows128 > /dev/null
    for tool in ${SAN_TOOLS:-racecheck initcheck}; do
      date +%T; timeout ${SAN_T:-120} "$cs" --tool $tool --print-limit 100000 --error-exitcode 9 "$Q" train --config ${SAN_CONFIG:-configs/tiny.json} \
        --rows /tmp/rows128 --seed 1 --steps 2 --global-batch 2 --device cuda --quiet --overwrite \
        --out /tmp/cs-$tool > "$OUT/sanitizer-$tool.log" 2>&1
      echo "compute-sanitizer $tool rc $?"; tail -3 "$OUT/sanitizer-$tool.log"
      echo "kernels named in its reports:"; grep -E "^=========     at " "$OUT/sanitizer-$tool.log" | sed 's/(.*//' | sort | uniq -c | sort -rn | head -20
    done
    # Which reports are the kernels' own: the op tests feed kernels from cudaMemcpy'd inputs (no GEMM
    # before them), so a kernel flagged here reads memory nobody wrote; one flagged only in training reads
    # what another writer (cuBLASLt) wrote in a way initcheck may not track.
    if [ -n "${SAN_TESTS:-}" ]; then
      date +%T; timeout ${SAN_T:-120} "$cs" --tool initcheck --print-limit 100000 "$B/bin/cuda_tests" --gtest_brief=1 \
        --gtest_filter="$SAN_TESTS" > "$OUT/sanitizer-initcheck-tests.log" 2>&1
      echo "compute-sanitizer initcheck on cuda_tests ($SAN_TESTS) rc $?"
      grep -E "^=========     at " "$OUT/sanitizer-initcheck-tests.log" | sed 's/(.*//' | sort | uniq -c | sort -rn | head -20
      grep -E "ERROR SUMMARY|PASSED|FAILED" "$OUT/sanitizer-initcheck-tests.log" | tail -3
    fi
  else
    echo "compute-sanitizer: not on this machine"
  fi
fi
if [ "${DP:-0}" = 1 ]; then
  # Data parallelism: two ranks sharing the GPU (MPI-staged), the same run twice; then one rank twice.
  "$Q" data synth --overwrite --conversations 400 --row-tokens 512 --out /tmp/rows512 > /dev/null
  dflags=(train --config tests/fixtures/configs/determinism.json --rows /tmp/rows512 --seed 3 --steps 4 --global-batch 4
          --lr 1e-3 --clip-grad 1.0 --device cuda --save-hf --quiet --overwrite)
  for i in 1 2; do
    date +%T; timeout 150 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 "$Q" "${dflags[@]}" --dp 2 \
      --out /tmp/dp2-$i < /dev/null > /tmp/dp2-$i.log 2>&1; echo "dp2 run $i rc $?"
    (cd /tmp/dp2-$i/hf 2>/dev/null && find . -type f | sort | xargs sha256sum) > "$OUT/dp2-$i.sha256"
    mkdir -p "$OUT/dp2-$i" && cp /tmp/dp2-$i/metrics.jsonl "$OUT/dp2-$i/" 2>/dev/null
  done
  python3 - /tmp/dp2-1/metrics.jsonl /tmp/dp2-2/metrics.jsonl <<'PY'
import json, sys
def key(p):
    try: return [(m["loss"], m["grad_norm"], m.get("expert_tokens")) for m in map(json.loads, open(p))]
    except OSError: return None
a, b = key(sys.argv[1]), key(sys.argv[2])
print("dp2: per-step loss, grad norm, expert counts", "identical" if a and a == b else "DIFFER", a and [x[:2] for x in a])
PY
  cmp -s "$OUT/dp2-1.sha256" "$OUT/dp2-2.sha256" && echo "dp2: exports identical" || echo "dp2: exports DIFFER"
fi
for i in $(seq 1 "$RUNS"); do
  date +%T; timeout 150 "$Q" train --config configs/slice.json --rows /tmp/rows8192 --seed 11 --steps 4 \
    --global-batch 2 --lr 1e-4 --clip-grad 1.0 --device cuda --save-hf --overwrite --out /tmp/det-$i \
    > /tmp/det-$i.log 2>&1
  echo "run $i rc $?"; tail -1 /tmp/det-$i.log
  mkdir -p "$OUT/det-$i" && cp /tmp/det-$i/metrics.jsonl "$OUT/det-$i/" 2>/dev/null
  if [ -d /tmp/det-$i/hf ]; then
    (cd /tmp/det-$i/hf && find . -type f | sort | xargs sha256sum) > "$OUT/det-$i/hf.sha256"
    echo "run $i export sha256 (of the per-file list): $(sha256sum < "$OUT/det-$i/hf.sha256" | cut -c1-16)"
    rm -rf /tmp/det-$i/hf /tmp/det-$i/checkpoint*
  fi
done
python3 - "$OUT" "$RUNS" <<'PY'
import json, sys, hashlib
out, n = sys.argv[1], int(sys.argv[2])
runs = []
for i in range(1, n + 1):
    try: runs.append([json.loads(l) for l in open(f"{out}/det-{i}/metrics.jsonl")])
    except OSError: runs.append([])
print("step  " + "  ".join(f"loss[{i+1}]          gnorm[{i+1}]" for i in range(n)))
for s in range(max(map(len, runs))):
    print(f"{s:4d}  " + "  ".join(f"{r[s]['loss']!r:<17} {r[s]['grad_norm']!r:<17}" if s < len(r) else "-" for r in runs))
def key(r): return [(m['loss'], m['grad_norm'], m.get('expert_tokens')) for m in r]
same = all(runs[0] and key(r) == key(runs[0]) for r in runs)
print("metrics (loss, grad norm, expert counts) bit-identical across runs:", same)
for i, r in enumerate(runs):
    h = hashlib.sha256(json.dumps([m.get('expert_tokens') for m in r]).encode()).hexdigest()[:16]
    print(f"run {i+1}: steps {len(r)}, step ms {[round(1000*m['step_time_s'],1) for m in r]}, counts sha {h}")
PY
for i in $(seq 2 "$RUNS"); do
  cmp -s "$OUT/det-1/hf.sha256" "$OUT/det-$i/hf.sha256" && echo "export $i == export 1" || echo "export $i DIFFERS from export 1"
done
} 2>&1 | tee "$OUT/determinism-check.txt"
if [ -n "${THEN:-}" ]; then bash -c "$THEN"; fi
