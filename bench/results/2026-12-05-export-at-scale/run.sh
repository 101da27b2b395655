#!/usr/bin/env bash
# Issue 44's must-show 1: the seed-shaped 42-layer model (configs/seed-shape) trained on 32 CPU ranks in the
# seed's layout (TP4 SP PP4 12/10/10/10 EP8 DP2, optimizer offload 0.7) with --save and --save-hf: the export
# written with every rank's host memory added during it; `quill export` of its checkpoint on 1 and 8 ranks
# byte-identical to the in-run export (cmp); and the streamed export against the gather it replaced, each
# rank's added host memory, in one process per rank on the same layout (tests/parallel_mpi/streamed_export_test.cc,
# HostMemoryAgainstTheGather with QUILL_EXPORT_SEED_LAYOUT=1).
# Usage: bench/results/2026-12-05-export-at-scale/run.sh OUT [BUILD=build]
set -euo pipefail
OUT=${1:?usage: run.sh OUT [BUILD]}
B=${2:-build}
Q=$B/quill
MPI=(timeout -k 10 1500 mpirun --oversubscribe --allow-run-as-root --bind-to none)
CONFIG=configs/seed-shape/config.json
mkdir -p "$OUT"
"$Q" data synth --overwrite --conversations 2000 --row-tokens 32 --max-rows 256 --out "$OUT/rows" > /dev/null
t0=$(date +%s)
"${MPI[@]}" -np 32 "$Q" train --config "$CONFIG" --rows "$OUT/rows" --seed 1234 --steps 2 --global-batch 8 \
  --lr 1e-5 --min-lr 1e-6 --warmup-fraction 0.1 --freeze-preset miles --loss-vocab padded \
  --tp 4 --sp --pp 4 --pp-layers 12,10,10,10 --ep 8 --dp 2 \
  --optimizer-cpu-offload --optimizer-offload-fraction 0.7 --overlap-cpu-optimizer-d2h-h2d \
  --save-hf --save "$OUT/seed/checkpoint" --out "$OUT/seed" --overwrite --quiet < /dev/null > "$OUT/train.log" 2>&1
t1=$(date +%s)
echo "train + in-run export on 32 ranks: $((t1 - t0)) s (wall)"
grep -E "save-hf" "$OUT/train.log" | sort -u
for n in 1 8; do
  rm -rf "$OUT/export-np$n"
  if [ "$n" = 1 ]; then
    "$Q" export --checkpoint "$OUT/seed/checkpoint" --out "$OUT/export-np$n" --config "$CONFIG" < /dev/null
  else
    "${MPI[@]}" -np "$n" "$Q" export --checkpoint "$OUT/seed/checkpoint" --out "$OUT/export-np$n" --config "$CONFIG" < /dev/null
  fi
  for f in "$OUT/seed/hf"/*; do cmp "$f" "$OUT/export-np$n/$(basename "$f")" && echo "cmp np$n $(basename "$f"): identical"; done
  [ "$(ls "$OUT/seed/hf" | wc -l)" = "$(ls "$OUT/export-np$n" | wc -l)" ] && echo "np$n: same file list ($(ls "$OUT/seed/hf" | tr '\n' ' '))"
done
ls -l "$OUT/seed/hf"
QUILL_EXPORT_SEED_LAYOUT=1 "${MPI[@]}" -np 32 "$B/tests/parallel_mpi_tests" \
  --gtest_filter=StreamedExport.HostMemoryAgainstTheGather < /dev/null 2>&1 | grep -v "^\[" | grep -v "^$"
