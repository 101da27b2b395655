#!/usr/bin/env bash
# Packs what the GPU machine needs to run quill built here: the quill binary, the test binaries,
# and the non-CUDA, non-MPI shared libraries they load (that machine has CUDA 13 and OpenMPI of
# its own, but not Debian's fmt or yaml-cpp). Usage: scripts/gpu-bundle.sh BUILD_DIR OUT_DIR
# [BINARIES...] names which test binaries to take (default: the GPU ones); binaries are stripped
# so the bundle fits the device tool's 64 MiB.
# On the GPU machine: export LD_LIBRARY_PATH=$PWD/OUT_DIR/lib:$LD_LIBRARY_PATH
# The device tool's 64 MiB counts the tracked tree too (33 MB on 2026-12-06, mostly bench/results), and a bundle with
# quill, cuda_tests and grouped_bench is 33 MB: OUT_DIR.tgz (written beside the folder, about 13 MB) travels
# instead: run(carry=["build/gpu-bundle.tgz"], command="tar -xzf build/gpu-bundle.tgz -C build && bash scripts/gpu/...").
set -euo pipefail
build=$1
out=$2
shift 2
tests=("$@")
((${#tests[@]})) || tests=(cuda_tests comm_nccl_tests comm_nccl_mpi_tests)
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
cp "$build/quill" "$out/bin/"
for t in "${tests[@]}"; do
  [ -x "$build/tests/$t" ] && cp "$build/tests/$t" "$out/bin/"
done
strip "$out"/bin/*
for b in "$out"/bin/*; do
  ldd "$b" | awk '/=> \//{print $3}'
done | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libstdc++*|libgcc_s*|ld-linux*|libpthread*|libdl*|librt*|libz.so*|libudev*) ;;  # the system's own
    libcu*|libnccl*|libnvidia*|libmpi*|libopen-*|libpmix*|libhwloc*|libevent*|libucp*|libucs*) ;;  # there already
    *) cp -L "$lib" "$out/lib/" ;;
  esac
done
# What the device scripts print: the commit, marked when tracked files differ from it (a bundle of uncommitted code).
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD -- 2>/dev/null || commit="$commit+uncommitted"
echo "$commit" > "$out/COMMIT"
tar -czf "$out.tgz.part" -C "$(dirname "$out")" "$(basename "$out")" && mv "$out.tgz.part" "$out.tgz"
du -sh "$out" "$out.tgz"
