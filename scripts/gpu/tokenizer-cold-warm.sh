#!/usr/bin/env bash
# One part of a device call (issue 15): bench/tokenizer/cold-warm.sh (quill against tiktoken, cold and warm,
# 1 and 16 threads, on non-repeating natural text) with the GPU bundle's quill, so that one call can carry both
# the bundle and the tokenizer's inputs under the 64 MiB limit. build/gpu-tok holds the rank file and the corpus
# compressed (python3's lzma unpacks it there; the GPU image has no zstd):
#   here:   scripts/fetch-o200k.sh build/gpu-tok/o200k_base.tiktoken
#           python3 tools/tokenizer/make_natural_corpus.py --out /tmp/corpus && tar -C /tmp -cJf build/gpu-tok/corpus.tar.xz corpus
#   device: run(carry=["build/gpu-bundle", "build/gpu-tok"], command="bash scripts/gpu/tokenizer-cold-warm.sh")
# Extra arguments go to cold_warm.py (e.g. --reps 2).
set -uo pipefail
B=$PWD/build/gpu-bundle
tok=/tmp/gpu-tok
rm -rf "$tok" && mkdir -p "$tok"
cp "$B/bin/quill" "$tok/quill" && cp -r "$B/lib" "$tok/lib" && cp "$B/COMMIT" "$tok/COMMIT"
cp build/gpu-tok/o200k_base.tiktoken "$tok/"
python3 -c "import tarfile, sys; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" build/gpu-tok/corpus.tar.xz "$tok"
bash bench/tokenizer/cold-warm.sh "$tok" "$@"
