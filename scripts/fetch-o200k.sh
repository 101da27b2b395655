#!/usr/bin/env bash
# Obtains tiktoken's o200k_base ranks for the tokenizer tests and benchmarks.
#
# The ranks ship inside the npm package js-tiktoken (MIT) as dist/ranks/o200k_base.cjs: a JS
# object {pat_str, special_tokens, bpe_ranks}, where bpe_ranks holds lines
# "<ignored> <first rank> <base64 token> <base64 token> ..." (consecutive ranks). This script
# unpacks it with npm and node, writes the standard tiktoken rank file ("<base64> <rank>" per line,
# by rank), and checks the SHA-256 that tiktoken itself expects of o200k_base.tiktoken.
#
# Usage: scripts/fetch-o200k.sh [OUT_FILE]   (default: ${QUILL_BUILD:-build}/o200k_base.tiktoken)
# Exits 0 without work when OUT_FILE already has the right hash.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-${QUILL_BUILD:-build}/o200k_base.tiktoken}
version=1.0.21
expected=446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d

if [ -f "$out" ] && [ "$(sha256sum "$out" | cut -d' ' -f1)" = "$expected" ]; then
  exit 0
fi
for tool in npm node; do
  command -v "$tool" >/dev/null || { echo "fetch-o200k: $tool is not installed; cannot fetch the o200k_base ranks" >&2; exit 1; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "js-tiktoken@$version" >/dev/null && tar xzf "js-tiktoken-$version.tgz")
mkdir -p "$(dirname "$out")"
node - "$tmp/package/dist/ranks/o200k_base.cjs" "$out.tmp.$$" <<'JS'
const [src, dst] = process.argv.slice(2);
const m = require(src);
const ranks = (m.default || m).bpe_ranks;
const rows = [];
for (const line of ranks.split("\n")) {
  if (!line) continue;
  const [, offset, ...tokens] = line.split(" ");
  tokens.forEach((t, i) => rows.push([parseInt(offset, 10) + i, t]));
}
rows.sort((a, b) => a[0] - b[0]);
require("fs").writeFileSync(dst, rows.map(([r, t]) => `${t} ${r}\n`).join(""));
JS
got=$(sha256sum "$out.tmp.$$" | cut -d' ' -f1)
if [ "$got" != "$expected" ]; then
  rm -f "$out.tmp.$$"
  echo "fetch-o200k: the converted ranks hash to $got, expected $expected" >&2
  exit 1
fi
mv "$out.tmp.$$" "$out"
echo "fetch-o200k: wrote $out"
