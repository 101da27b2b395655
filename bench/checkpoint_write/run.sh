#!/usr/bin/env bash
# Checkpoint write speed against the disk's: quill's safetensors writer (write + fsync + rename) with
# 1 and with several threads, and dd writing the same bytes with O_DIRECT and with a final fsync, all
# into DIR (the disk under test). Usage: bench/checkpoint_write/run.sh DIR [MEGABYTES (2048)]
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=${1:?usage: run.sh DIR [MEGABYTES]}
mb=${2:-2048}
build=${QUILL_BUILD:-build}
cmake --build "$build" --target checkpoint_write_bench >/dev/null
mkdir -p "$dir"
count=$((mb * 1000000 / 1048576))
echo "machine: $(nproc) cores, $(df -h "$dir" | awk 'NR==2 {print $1" "$2}'), commit $(git rev-parse --short HEAD), $(date -u +%F)"
for i in 1 2; do
  echo "dd oflag=direct:"; dd if=/dev/zero of="$dir/dd.bin" bs=1M count=$count oflag=direct 2>&1 | tail -1
  echo "dd conv=fsync:";   dd if=/dev/zero of="$dir/dd.bin" bs=1M count=$count conv=fsync 2>&1 | tail -1
  rm -f "$dir/dd.bin"
  "$build/tests/checkpoint_write_bench" "$dir" "$mb" 1 2 4 8
done
