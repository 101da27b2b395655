#!/usr/bin/env bash
# Where the attention backward's time goes, instruction by instruction (issue 42): Nsight Compute's source counters
# (warp-state samples and executed instructions per SASS instruction) for the two backward kernels and the wgmma forward at a TP4 rank's
# shapes (attention_bench --heads 8:2: T = 8,192, 8 q / 2 kv heads, head dim 128, bias rank 16):
#   tc-local   attention_tc_backward_kernel, the local layer's first call (mma.sync: what a local layer runs)
#   wg-global  attention_wg_backward_kernel, the global layer's first call (attention_bench launches it 28 times in
#              the local layer's "backward wgmma" and "backward wgmma producer" rows first: one checked call, 3
#              warm-up, 10 timed each)
#   wg-global-producer  the producer form's first call on the global layer (after the global layer's 26 routed calls,
#              the table trained and frozen, and 14 of its "backward wgmma" row)
#   wg-global-forward  attention_wg_forward_kernel, the global layer's first call (after the local layer's 28: 14 each
#              of its "forward wgmma" and "forward wgmma wide" rows)
#   wg-global-forward-wide  the wide form's first call on the global layer (after the global layer's 13 routed calls
#              and 14 of its "forward wgmma" row)
# Each: the summary sections, then the source page as CSV (one row per SASS instruction: its text, executed
# instructions, warp-state samples by reason); scripts/attention-sass-hotspots.py folds it here into the hot regions.
# Also the kernels' SASS (cuobjdump), to read the loop's instruction count.
#   here:   scripts/gpu-bundle.sh build build/gpu-bundle cuda_tests quill grouped_bench attention_bench
#   device: run(carry=["build/gpu-bundle.tgz"], command="tar -xzf build/gpu-bundle.tgz -C build && bash scripts/gpu/ncu-attention-source.sh")
# Back: $OUT/ncu-source.txt (summaries), $OUT/<name>-source.csv.gz, $OUT/<name>.sass.gz.
set -uo pipefail
# shellcheck source=scripts/gpu/bundle-env.sh
source "$(dirname "$0")/bundle-env.sh"
NCU=${NCU:-/usr/local/cuda/bin/ncu}
CUOBJDUMP=${CUOBJDUMP:-/usr/local/cuda/bin/cuobjdump}
mkdir -p "$OUT"
{
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
echo "quill $(cat "$B/COMMIT"); $(date -u +%FT%TZ)"
while read -r name kernel skip; do
  rep=/tmp/ncu-$name
  timeout 200 "$NCU" -k "regex:$kernel" --launch-skip "$skip" -c 1 --import-source no \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section SourceCounters \
    --section Occupancy -f -o "$rep" "$B/bin/attention_bench" --heads 8:2 > "$OUT/$name-ncu.log" 2>&1
  echo "== $name ($kernel, launch $((skip + 1))): ncu rc $?"
  "$NCU" --import "$rep.ncu-rep" --print-summary none > "$OUT/$name-details.txt" 2>&1
  grep -E "Duration|Compute \(SM\) Throughput|Issue Slots Busy|Executed Ipc A|Warp Cycles Per Issued|Registers Per|Achieved Occupancy" \
    "$OUT/$name-details.txt" | head -12
  "$NCU" --import "$rep.ncu-rep" --page source --csv --print-source sass 2> "$OUT/$name-source.err" \
    | gzip > "$OUT/$name-source.csv.gz"
  echo "source rows: $(zcat "$OUT/$name-source.csv.gz" | wc -l)"
  "$CUOBJDUMP" -sass -fun "$kernel" "$B/bin/attention_bench" 2>&1 | gzip > "$OUT/$name.sass.gz" || true
  [ "$(zcat "$OUT/$name.sass.gz" | wc -l)" -gt 10 ] \
    || "$CUOBJDUMP" -sass "$B/bin/attention_bench" 2>&1 | awk -v k="$kernel" '/Function : /{on = index($0, k) > 0} on' \
      | gzip > "$OUT/$name.sass.gz"
  echo "sass lines: $(zcat "$OUT/$name.sass.gz" | wc -l)"
done <<'EOF'
tc-local attention_tc_backward_kernel 0
wg-global attention_wg_backward_kernel 28
wg-global-producer attention_wg_backward_kernel 68
wg-global-forward attention_wg_forward_kernel 28
wg-global-forward-wide attention_wg_forward_kernel 55
EOF
date -u +%T
} 2>&1 | tee "$OUT/ncu-source.txt"
