# Sourced by the multi-GPU layout calls (two-gpu.sh, eight-gpu.sh): the bundle's environment, one
# run per layout on the same rows and flags, the NCCL probe at the sizes the runs' profiles show,
# and the outputs copied back. The caller sets W (work dir), OUT, PARTS and the array `flags`
# (quill train's arguments shared by every run) before calling these.
B=$PWD/build/gpu-bundle
Q=${Q:-$B/bin/quill}
PROBE=${PROBE:-$B/bin/nccl_probe}
[ -d "$B/lib" ] && export LD_LIBRARY_PATH=$B/lib:${LD_LIBRARY_PATH:-}
export NCCL_NVLS_ENABLE=0
MPI=(mpirun --allow-run-as-root --oversubscribe --bind-to none -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE)
has() { [[ " $PARTS " == *" $1 "* ]]; }
# make_rows TOKENS: synthetic rows of that length in $W/rows-TOKENS (kept across calls; a directory without
# its manifest, left by a killed synth, is made again), path in ROWS.
make_rows() {
  ROWS=$W/rows-$1
  [ -f "$ROWS/manifest.json" ] && return 0
  rm -rf "$ROWS"
  "$Q" data synth --conversations 20000 --row-tokens "$1" --out "$ROWS" > /dev/null
}
# run_one NAME [QUILL-FLAGS...]: one process (the caller picks its GPU with CUDA_VISIBLE_DEVICES).
run_one() {
  local name=$1; shift
  date +%T; timeout ${T:-240} "$Q" "${flags[@]}" "$@" --out "$W/$name" > "$W/$name.log" 2>&1
  local rc=$?; echo "$name: rc $rc; $(grep -E '^trained' "$W/$name.log" | head -1)"
  [ $rc != 0 ] && grep -vE "^ *\[|orte_base_help|^-+$" "$W/$name.log" | tail -8
  return 0
}
# run_mpi NP NAME LAYOUT-FLAGS...: NP processes, one per GPU.
run_mpi() {
  local np=$1 name=$2; shift 2
  date +%T; timeout ${T:-240} "${MPI[@]}" -np "$np" "$Q" "${flags[@]}" "$@" --out "$W/$name" < /dev/null > "$W/$name.log" 2>&1
  local rc=$?; echo "$name ($*): rc $rc; $(grep -E '^trained' "$W/$name.log" | head -1)"
  [ $rc != 0 ] && grep -vE "^ *\[|orte_base_help|^-+$" "$W/$name.log" | tail -8
  return 0
}
# probe_nccl NP GROUP_SIZES RUN_DIR...: nccl_probe (bf16 and f32) at the per-call sizes of the runs' profiles.
probe_nccl() {
  local np=$1 groups=$2; shift 2
  [ -x "$PROBE" ] || { echo "no $PROBE: probe skipped"; return 0; }
  local sizes; sizes=$(python3 tools/runs/layout_report.py --sizes "$@")
  echo "nccl_probe at the profiled sizes: ${sizes:-none}"
  [ -n "$sizes" ] || return 0
  for dt in bf16 f32; do
    timeout ${PROBE_T:-150} "${MPI[@]}" -np "$np" "$PROBE" --sizes "$sizes" --group-sizes "$groups" --dtype $dt \
      --json "$W/probe-$dt.jsonl" < /dev/null > "$W/probe-$dt.log" 2>&1
    echo "nccl_probe $dt: rc $?"; grep -v "^ *\[" "$W/probe-$dt.log" | head -80
  done
}
# collect NAME...: each run's log, metrics, summary, profiles, plan and projection into $OUT/NAME/.
collect() {
  for d in "$@"; do
    [ -d "$W/$d" ] || continue
    mkdir -p "$OUT/$d"; cp "$W/$d.log" "$OUT/$d/train.log" 2>/dev/null
    cp "$W/$d"/metrics.jsonl "$W/$d"/summary.json "$W/$d"/op_profile_step* "$W/$d"/collectives.json "$W/$d"/plan.json \
      "$W/$d"/projection*.json "$OUT/$d/" 2>/dev/null
  done
  cp "$W"/probe-*.jsonl "$W"/probe-*.log "$W"/layout-report.txt "$OUT/" 2>/dev/null
  return 0
}
