#!/usr/bin/env bash
# One device call (issues 23, 24): the slice benchmark (bench/slice/run.sh: configs/slice.json, 8,192-token rows,
# checkpoint init, gb1 and gb8) for several quill arms in one call, the transformers peer once beside them:
#   new      this bundle (build/gpu-bundle) as it is;
#   ENV arms this bundle with environment variables (ARMS="name:VAR=1,VAR2=2 ...");
#   base     the base build in .gpu-base/ (bin/, lib/, COMMIT; its bench/, tools/, configs/ in .gpu-base/src/),
#            e.g. 40b8506, the last build with float atomics (issue 24's "before").
# Before the arms, TESTS (a gtest filter of cuda_tests, run with each ARMS environment too) and the attention
# benchmark (without the wgmma rows) under each arm's environment.
# Here first: cmake --build build -j2 && scripts/gpu-bundle.sh build build/gpu-bundle cuda_tests attention_bench
#             && git describe --always --dirty > build/gpu-bundle/COMMIT
# Then: run(carry=["build/gpu-bundle", ".gpu-base"], command="bash scripts/gpu/slice-arms.sh")
# Environment [defaults]: OUT [/tmp/out]  ARMS [""]  TESTS ["CudaAttention*:*CudaAttentionTest*:CudaDeterminism*"]
#   PEER [1]  BASE_RUN [1: the base arm when .gpu-base exists]  STEPS8 [8]  ARM_BUDGET_S [110: seconds per quill arm, gb1 and gb8;
#   150 leaves gb8 its 8 steps]
set -uo pipefail
OUT=${OUT:-/tmp/out}
B=$PWD/build/gpu-bundle
BASE=$PWD/.gpu-base
export LD_LIBRARY_PATH=$B/lib:${LD_LIBRARY_PATH:-} NCCL_NVLS_ENABLE=0
TESTS=${TESTS-"CudaAttention*:*CudaAttentionTest*:CudaDeterminism*"}
ARMS=${ARMS:-}
WORK=/tmp/slice-work
mkdir -p "$OUT/arms"
env_of() { echo "${1#*:}" | tr ',' ' '; }  # "name:A=1,B=2" -> "A=1 B=2"
{
echo "quill $(cat "$B/COMMIT"); base $(cat "$BASE/COMMIT" 2>/dev/null || echo none); $(date -u +%FT%TZ)"
if [ -n "$TESTS" ]; then
  for arm in "default:" $ARMS; do
    date +%T; env $(env_of "$arm") timeout 150 "$B/bin/cuda_tests" --gtest_brief=1 --gtest_filter="$TESTS" \
      > "$OUT/arms/tests-${arm%%:*}.log" 2>&1
    echo "cuda_tests ($TESTS) with ${arm%%:*} [$(env_of "$arm")]: rc $?; $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/arms/tests-${arm%%:*}.log" | tr '\n' ' ')"
    grep -E "^\[  FAILED  \]" "$OUT/arms/tests-${arm%%:*}.log" | head -5
  done
fi
for arm in "default:" $ARMS; do
  echo "attention_bench ${arm%%:*} [$(env_of "$arm")]:"
  env $(env_of "$arm") timeout 60 "$B/bin/attention_bench" --no-wgmma 2>&1 | tail -2
done
# The checkpoint, rows and ceilings once; then the arms, the new build last so that the peer's report (which reads
# the quill runs left in WORK) sets the new build beside the peer.
WORK=$WORK OUT=$OUT/arms/prep QUILL=$B/bin/quill BUDGET_S=80 PHASES="ceilings init rows" bash bench/slice/run.sh \
  > "$OUT/arms/slice-prep.log" 2>&1
tail -3 "$OUT/arms/slice-prep.log"
slice_arm() {  # NAME QUILL_DIR SRC_DIR ENV...
  local name=$1 qdir=$2 src=$3
  shift 3
  echo "== slice: $name ($(cat "$qdir/COMMIT") $*)"
  (cd "$src" && env "$@" LD_LIBRARY_PATH=$qdir/lib WORK=$WORK OUT=$OUT/arms/$name QUILL=$qdir/bin/quill BUDGET_S=${ARM_BUDGET_S:-110} \
    STEPS8=${STEPS8:-8} REUSE_INIT=1 PHASES="quill1 quill8 report" COMMIT="$(cat "$qdir/COMMIT") $*" bash bench/slice/run.sh \
    > "$OUT/arms/slice-$name.log" 2>&1)
  grep -A8 "^arm " "$OUT/arms/$name/slice-bench.txt" 2>/dev/null
}
if [ "${BASE_RUN:-1}" = 1 ] && [ -x "$BASE/bin/quill" ]; then slice_arm base "$BASE" "$BASE/src"; fi
for arm in $ARMS; do slice_arm "${arm%%:*}" "$B" "$PWD" $(env_of "$arm"); done
slice_arm new "$B" "$PWD"
if [ "${PEER:-1}" = 1 ]; then
  echo "== slice: the peer (transformers), beside the new build's arms"
  WORK=$WORK OUT=$OUT/arms/peer QUILL=$B/bin/quill BUDGET_S=160 STEPS8=${STEPS8:-8} REUSE_INIT=1 PHASES="peer report" \
    COMMIT=$(cat "$B/COMMIT") bash bench/slice/run.sh > "$OUT/arms/slice-peer.log" 2>&1
  grep -A8 "^arm " "$OUT/arms/peer/slice-bench.txt" 2>/dev/null
fi
date +%T
} 2>&1 | tee "$OUT/slice-arms.txt"
