#!/usr/bin/env bash
# Issue 24: the slice step time of this build (fixed-order reductions), of the base build 40b8506 (.gpu-base:
# float atomics), and of this build with the attention dQ additions unordered, at 1 and 8 rows per step.
# run(carry=["build/gpu-bundle", ".gpu-base"], command="bash scripts/gpu/determinism-cost.sh")
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export NCCL_NVLS_ENABLE=0
N=$PWD/build/gpu-bundle; Bs=$PWD/.gpu-base
$N/bin/quill data synth --conversations 400 --row-tokens 8192 --out /tmp/r8 > /dev/null 2>&1 || LD_LIBRARY_PATH=$N/lib $N/bin/quill data synth --conversations 400 --row-tokens 8192 --out /tmp/r8 >/dev/null
for gb in 1 8; do
 for arm in ${ARMS:-new base new-unordered}; do
  case $arm in base) Q=$Bs/bin/quill; L=$Bs/lib;; *) Q=$N/bin/quill; L=$N/lib;; esac
  steps=$([ $gb = 1 ] && echo 10 || echo 5)
  env LD_LIBRARY_PATH=$L timeout ${TR:-100} $Q train --config configs/slice.json --rows /tmp/r8 --seed 11 --steps $steps --global-batch $gb --lr 1e-4 --clip-grad 1.0 --device cuda --overwrite $([ $arm = new-unordered ] && echo --attention-dq-order arrival) --out /tmp/ab-$arm-$gb > /tmp/ab-$arm-$gb.log 2>&1
  echo "gb$gb $arm rc $?: $(grep -o 'median [0-9.]* ms, min [0-9.]*, max [0-9.]*' /tmp/ab-$arm-$gb.log) $(grep -o 'MFU [0-9.]*%' /tmp/ab-$arm-$gb.log)"
 done
done 2>&1 | tee $OUT/ab.txt
