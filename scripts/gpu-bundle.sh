#!/usr/bin/env bash
# Packs what the GPU machine needs to run quill built here: the quill binary, the test binaries,
# and the non-CUDA, non-MPI shared libraries they load (that machine has CUDA 13 and OpenMPI of
# its own, but not Debian's fmt or yaml-cpp). Usage: scripts/gpu-bundle.sh BUILD_DIR OUT_DIR
# On the GPU machine: export LD_LIBRARY_PATH=$PWD/OUT_DIR/lib:$LD_LIBRARY_PATH
set -euo pipefail
build=$1
out=$2
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
for b in "$build/quill" "$build"/tests/*_tests; do
  [ -x "$b" ] && cp "$b" "$out/bin/"
done
for b in "$out"/bin/*; do
  ldd "$b" | awk '/=> \//{print $3}'
done | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libstdc++*|libgcc_s*|ld-linux*|libpthread*|libdl*|librt*) ;;   # the system's own
    libcu*|libnccl*|libcudnn*|libnvidia*|libmpi*|libopen-*|libpmix*|libhwloc*|libevent*|libucp*|libucs*) ;;  # there already
    *) cp -L "$lib" "$out/lib/" ;;
  esac
done
du -sh "$out"
