#!/usr/bin/env bash
# The tokenizer's thread scaling against the machine's own, in one call of about 3 minutes on the
# 16-vCPU GPU host (scaling.py says what each table means). TOK_DIR is what
#   bench/tokenizer/pack_quill.sh build-tok-rel TOK_DIR build-tok/o200k_base.tiktoken
# makes: quill, lib/, o200k_base.tiktoken and COMMIT. Extra arguments go to scaling.py (for a
# quick local check: --corpus-mb 2 --threads 1,2 --processes 1,2).
# Writes scaling.txt (what it prints) and scaling.jsonl (every raw result) to $OUT when set.
# Usage: bench/tokenizer/scaling.sh TOK_DIR [scaling.py options]
set -uo pipefail
tok=$(cd "${1:?usage: scaling.sh TOK_DIR [scaling.py options]}" && pwd)
shift
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/quill-scaling-out}
mkdir -p "$out"
export LD_LIBRARY_PATH=$tok/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} PYTHONUNBUFFERED=1
{
  echo "quill commit $(cat "$tok/COMMIT" 2>/dev/null || echo unknown); $(date -u +%FT%TZ); kernel $(uname -r)"
  lscpu | grep -E '^(Model name|CPU\(s\)|Thread\(s\) per core|Core\(s\) per socket|Socket\(s\)|NUMA node\(s\)|L1d|L2|L3)' |
    sed 's/:  */: /' | paste -sd';' -
  # A CPU quota or cpuset smaller than nproc would cap scaling whatever the code does.
  echo "nproc $(nproc); cgroup cpu.max $(cat /sys/fs/cgroup/cpu.max 2>/dev/null || echo -);" \
       "cpuset $(cat /sys/fs/cgroup/cpuset.cpus.effective 2>/dev/null || echo -);" \
       "MHz $(awk '/MHz/ {s += $4; n++} END {if (n) printf "%.0f (mean of %d)", s / n, n}' /proc/cpuinfo)"
  python3 "$here/scaling.py" --quill "$tok/quill" --ranks "$tok/o200k_base.tiktoken" --jsonl "$out/scaling.jsonl" "$@"
  echo "scaling.py rc $?"
} 2>&1 | tee "$out/scaling.txt"
