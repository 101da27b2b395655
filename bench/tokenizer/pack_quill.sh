#!/usr/bin/env bash
# Packs a built quill with the shared libraries it needs beyond the C/C++ runtime into one folder,
# to carry to a machine without quill's build dependencies (the GPU machine): run it there with
#   LD_LIBRARY_PATH=DIR/lib DIR/quill ...
# With RANKS, the rank file is copied in too (scaling.sh expects OUT_DIR/o200k_base.tiktoken).
# OUT_DIR/COMMIT records the source tree's commit (with -dirty when it had changes).
# Usage: bench/tokenizer/pack_quill.sh BUILD_DIR OUT_DIR [RANKS]
set -euo pipefail
build=${1:?build directory}
out=${2:?output directory}
ranks=${3:-}
mkdir -p "$out/lib"
git -C "$(dirname "$0")" describe --always --dirty > "$out/COMMIT" 2>/dev/null || echo unknown > "$out/COMMIT"
if [ -n "$ranks" ]; then cp "$ranks" "$out/o200k_base.tiktoken"; fi
strip -o "$out/quill" "$build/quill"
ldd "$build/quill" | awk '/=> \// {print $3}' | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libstdc++.so*|libgcc_s.so*|ld-linux*|libpthread.so*|libdl.so*|librt.so*) ;;
    *) cp -L "$lib" "$out/lib/" ;;
  esac
done
du -sh "$out"
