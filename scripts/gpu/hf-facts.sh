#!/usr/bin/env bash
# One call on the GPU machine (no quill binary needed): transformers' Inkling facts (config defaults,
# configs as save_pretrained writes them, tensor names of both checkpoint forms) and pyarrow-written
# Parquet fixtures. Everything comes back as one tarball under $OUT.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
work=/tmp/hf-facts
rm -rf "$work" && mkdir -p "$work"
python3 tools/parity/hf_facts.py --out "$work/hf" 2>&1 | tail -20
python3 tools/parquet/make_fixtures.py --input data/synthetic/conversations.jsonl --count 150 --out "$work/parquet" 2>&1 | tail -5
python3 -c "import transformers, sys; print(transformers.__file__)"
tar -C "$work" -czf "$OUT/hf-facts.tar.gz" .
ls -la "$OUT"
