#!/usr/bin/env bash
# Packs a built quill with the shared libraries it needs beyond the C/C++ runtime into one folder,
# to carry to a machine without quill's build dependencies (the GPU machine): run it there with
#   LD_LIBRARY_PATH=DIR/lib DIR/quill ...
# Usage: bench/tokenizer/pack_quill.sh BUILD_DIR OUT_DIR
set -euo pipefail
build=${1:?build directory}
out=${2:?output directory}
mkdir -p "$out/lib"
strip -o "$out/quill" "$build/quill"
ldd "$build/quill" | awk '/=> \// {print $3}' | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libstdc++.so*|libgcc_s.so*|ld-linux*|libpthread.so*|libdl.so*|librt.so*) ;;
    *) cp -L "$lib" "$out/lib/" ;;
  esac
done
du -sh "$out"
