#!/usr/bin/env bash
# One device call: the seed's stages with two quill binaries of one bundle, one after the other on the same GPU
# (a change's before and after): build/gpu-bundle/bin/quill-before (added to the bundle by hand, its commit in
# build/gpu-bundle/COMMIT-BEFORE) and the bundle's quill. Each arm is seed-stages-call.sh (the three stages at the
# GPU's memory settings, or CASES), its outputs under $OUT/before and $OUT/after; then the arms' compute per
# micro-batch side by side.
#   here:   scripts/gpu-bundle.sh build build/gpu-bundle cuda_tests quill grouped_bench; cp OLD build/gpu-bundle/bin/quill-before;
#           tar -czf build/gpu-bundle.tgz -C build gpu-bundle
#   device: run(carry=["build/gpu-bundle.tgz"], command="tar -xzf build/gpu-bundle.tgz -C build && bash scripts/gpu/two-builds-call.sh")
# Environment: CASES, CASE_TIMEOUT (seed-stages-call.sh), TESTS (a cuda_tests filter, run once first).
set -uo pipefail
dir=$(dirname "$0")
# shellcheck source=scripts/gpu/bundle-env.sh
source "$dir/bundle-env.sh"
top=$OUT
if [ ! -x "$B/bin/quill-before" ]; then
  echo "two-builds-call.sh: $B/bin/quill-before is missing: add the before build to the bundle (this script's header)" >&2
  exit 2
fi
mkdir -p "$top"
{
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
echo "after: quill $(cat "$B/COMMIT" 2>/dev/null); before: $(cat "$B/COMMIT-BEFORE" 2>/dev/null); $(date -u +%FT%TZ)"
} | tee "$top/ab.txt"
for arm in before after; do
  bin=$B/bin/quill
  [ "$arm" = before ] && bin=$B/bin/quill-before
  tests=${TESTS:-}
  [ "$arm" = before ] && tests=""
  OUT=$top/$arm Q=$bin TESTS=$tests bash "$dir/seed-stages-call.sh" > /dev/null 2>&1
  echo "$arm rc $?" | tee -a "$top/ab.txt"
  grep -E "^rank|train rc|cuda_tests" "$top/$arm/seed-stages.txt" | tee -a "$top/ab.txt"
  grep -E "tokens/s/GPU|compute is" "$top/$arm/project.txt" 2>/dev/null | tee -a "$top/ab.txt"
done
