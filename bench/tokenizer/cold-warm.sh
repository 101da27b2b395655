#!/usr/bin/env bash
# quill against tiktoken, cold and warm, 1 and 16 threads, on non-repeating natural text, in one
# call of about 3-4 minutes on the 16-vCPU GPU host (cold_warm.py says what each figure is).
# TOK_DIR is what bench/tokenizer/pack_quill.sh makes (quill, lib/, o200k_base.tiktoken, COMMIT),
# with the corpus in TOK_DIR/corpus (tools/tokenizer/make_natural_corpus.py, built where quill is
# built: the GPU machine's image lacks the man pages and docs it is cut from). Extra arguments go
# to cold_warm.py (a local dry run without tiktoken: --no-tiktoken --threads 1,2).
# Writes cold-warm.txt (the table) and cold-warm.json (every raw figure) to $OUT when set.
# Usage: bench/tokenizer/cold-warm.sh TOK_DIR [cold_warm.py options]
set -uo pipefail
tok=$(cd "${1:?usage: cold-warm.sh TOK_DIR [cold_warm.py options]}" && pwd)
shift
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/quill-cold-warm-out}
mkdir -p "$out"
export LD_LIBRARY_PATH=$tok/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} PYTHONUNBUFFERED=1
{
  echo "quill commit $(cat "$tok/COMMIT" 2>/dev/null || echo unknown); $(date -u +%FT%TZ); kernel $(uname -r)"
  lscpu | grep -E '^(Model name|CPU\(s\)|Thread\(s\) per core|L2|L3)' | sed 's/:  */: /' | paste -sd';' -
  python3 "$here/cold_warm.py" --quill "$tok/quill" --ranks "$tok/o200k_base.tiktoken" --corpus "$tok/corpus" \
    --work "${TMPDIR:-/tmp}/quill-cold-warm" --out-txt "$out/cold-warm.table.txt" --out-json "$out/cold-warm.json" "$@"
  echo "cold_warm.py rc $?"
} 2>&1 | tee "$out/cold-warm.txt"
