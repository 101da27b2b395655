# Sourced by the device-call scripts (wgmma-bwd-check.sh): `one NAME FILTER LIMIT [VAR=VALUE...]`
# runs one gtest filter of $T (a test binary) in its own process under a time limit, with the variables in its
# environment, output to $OUT/$ONE_PREFIX$NAME.log; prints its rc and pass/fail lines, and on failure the lines
# that say what failed. So a kernel that traps or hangs costs only its own row.
# Also sets up what the callers share: OUT [/tmp/out] (created), B (the carried bundle, build/gpu-bundle) with its
# libraries on LD_LIBRARY_PATH, and T (its cuda_tests).
OUT=${OUT:-/tmp/out}
B=$PWD/build/gpu-bundle
export LD_LIBRARY_PATH=$B/lib:${LD_LIBRARY_PATH:-}
T=$B/bin/cuda_tests
mkdir -p "$OUT"
one() {
  local name=$1 filter=$2 limit=$3 log
  shift 3
  log="$OUT/${ONE_PREFIX:-}$name.log"
  env "$@" timeout "$limit" "$T" --gtest_brief=1 --gtest_filter="$filter" > "$log" 2>&1
  local rc=$?
  echo "$name ($filter${*:+, $*}): rc $rc; $(grep -E '^\[  (PASSED|FAILED) ' "$log" | tr '\n' ' ')"
  [ $rc = 0 ] || grep -E -B2 -A8 'Failure|first mismatch|error|trap' "$log" | head -60
}
