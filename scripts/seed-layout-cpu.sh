#!/usr/bin/env bash
# The seed's layout end to end on 32 CPU ranks (issue 20): `quill run` of the seed recipe unchanged but
# for the model and the data (configs/seed-shape: 42 layers shaped like Inkling-Small at hidden 64 —
# layers 0-1 dense, a global layer every sixth, 4 q / 4 kv heads, 16 experts, top-6, 2 shared; synthetic
# rows of ROW_TOKENS tokens), TP4 SP PP4 12/10/10/10 EP8 ETP1 DP2, offload 0.7 with overlap, against a
# one-rank `quill train` of the same model, rows and hyperparameters (the seed's: lr 1e-5 cosine to 1e-6,
# warm-up 0.1, weight decay 0.1, betas 0.9/0.98, clip 1.0, the padded-vocabulary loss and miles' frozen
# set of a miles recipe). The one-rank run is the convergence check's reference arm.
# Usage: scripts/seed-layout-cpu.sh OUT [STEPS=20] [GLOBAL_BATCH=128] [ROW_TOKENS=32]
set -euo pipefail
OUT=${1:?usage: scripts/seed-layout-cpu.sh OUT [STEPS] [GLOBAL_BATCH] [ROW_TOKENS]}
STEPS=${2:-20}
GB=${3:-128}
T=${4:-32}
SEED_RECIPE=${SEED_RECIPE:-tests/fixtures/recipes/seed.yaml}  # a copy of the seed recipe, byte for byte
Q=${Q:-build/quill}
MPI=(mpirun --oversubscribe --allow-run-as-root --bind-to none)
mkdir -p "$OUT"
"$Q" data synth --overwrite --conversations 20000 --row-tokens "$T" --max-rows 4096 --out "$OUT/rows" > /dev/null
start=$(date +%s)
# The reference arm: the same recipe with its placement put on one rank (layout sizes 1, the parallel
# flags 1 or dropped, one GPU), so that the configuration check compares the two recipes' flags.
python3 - "$SEED_RECIPE" "$OUT/one-rank.yaml" <<'PY'
import sys
text = open(sys.argv[1]).read()
for a, b in [("  count: 32\n", "  count: 1\n"), ("  per_node: 8\n", "  per_node: 1\n"), ("  tp: 4\n", "  tp: 1\n"),
             ("  pp: 4\n", "  pp: 1\n"), ("  ep: 8\n", "  ep: 1\n"), ("  dp: 2\n", "  dp: 1\n"),
             ("  sequence_parallel: true\n", "  sequence_parallel: false\n"),
             ("  layer_split:\n    first: 12\n    last: 10\n", ""), ("  label: TP4 PP4 EP8 DP2\n", "  label: one rank\n"),
             ("--actor-num-nodes 4", "--actor-num-nodes 1"), ("--actor-num-gpus-per-node 8", "--actor-num-gpus-per-node 1"),
             ("--num-gpus-per-node 8", "--num-gpus-per-node 1"),
             ("--tensor-model-parallel-size 4", "--tensor-model-parallel-size 1"), ("    --sequence-parallel \\\n", ""),
             ("--pipeline-model-parallel-size 4", "--pipeline-model-parallel-size 1"),
             ("    --decoder-first-pipeline-num-layers 12 \\\n", ""),
             ("--expert-model-parallel-size 8", "--expert-model-parallel-size 1")]:
    assert a in text, a
    text = text.replace(a, b, 1)
open(sys.argv[2], "w").write(text)
PY
"$Q" run "$OUT/one-rank.yaml" --model-dir configs/seed-shape --rows "$OUT/rows" --row-tokens "$T" --global-batch "$GB" \
  --steps "$STEPS" --device cpu --out "$OUT/one-rank" --overwrite > "$OUT/one-rank.log" 2>&1
mid=$(date +%s)
timeout 3000 "${MPI[@]}" -np 32 "$Q" run "$SEED_RECIPE" --model-dir configs/seed-shape --rows "$OUT/rows" \
  --row-tokens "$T" --global-batch "$GB" --steps "$STEPS" --device cpu --reference "$OUT/one-rank" \
  --out "$OUT/seed-layout" --overwrite < /dev/null > "$OUT/seed-layout.log" 2>&1 || echo "quill run rc $?"
end=$(date +%s)
echo "one rank: $((mid - start)) s; 32 ranks: $((end - mid)) s (wall, start-up included)"
python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
rows = lambda p: [json.loads(l) for l in open(p)]
a, b = rows(out + "/one-rank/metrics.jsonl"), rows(out + "/seed-layout/metrics.jsonl")
worst = {"loss": 0.0, "grad_norm": 0.0}
print("step  loss one rank      loss 32 ranks     rel       grad-norm rel  experts equal")
for x, y in zip(a, b):
    r = {k: abs(x[k] - y[k]) / abs(x[k]) for k in worst}
    for k in worst: worst[k] = max(worst[k], r[k])
    print(f"{x['step']:4d}  {x['loss']:.12f}  {y['loss']:.12f}  {r['loss']:.2e}  {r['grad_norm']:.2e}       {x['expert_tokens'] == y['expert_tokens']}")
print(f"{min(len(a), len(b))} steps; max relative difference: loss {worst['loss']:.2e}, grad norm {worst['grad_norm']:.2e}")
PY
grep -v '^ \[' "$OUT/seed-layout.log" | sort -u | grep -E "warning|note|convergence|strict|correlation" | head -40
