#!/usr/bin/env bash
# Local before/after (interleaved, medians). Binaries: /tmp/quill.before /tmp/quill.after
R=/work/wt-tokenizer/build/o200k_base.tiktoken
C=${C:-/tmp/nc}
N=${N:-7}
med() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo "== bench-encode, 1 thread, MB/s (median of $N, interleaved)"
for set in man code prose cjk all; do
  for mode in none warm; do
    w=$mode; [ $mode = warm ] && w=$C/$set.warm.txt
    for b in before after; do : > /tmp/m.$b; done
    for i in $(seq $N); do for b in before after; do
      /tmp/quill.$b data bench-encode --tokenizer $R --special-tokens o200k --input $C/$set.timed.txt --threads 1 --warm-up $w |
        python3 -c "import json,sys; r=json.load(sys.stdin); print(r['mb_per_s'], r['ids_sha256'][:16])" >> /tmp/m.$b; done; done
    printf "%-6s %-5s before %6.1f  after %6.1f  ids %s\n" $set $([ $mode = none ] && echo cold || echo warm) \
      $(cut -d' ' -f1 /tmp/m.before | med) $(cut -d' ' -f1 /tmp/m.after | med) "$(cut -d' ' -f2 /tmp/m.* | sort -u | tr '\n' ' ')"
  done
done
echo "== tokenizer load, 1 thread, s (data build --timing on 20 tiny conversations, median of $N)"
for b in before after; do : > /tmp/m.$b; done
for i in $(seq $N); do for b in before after; do rm -rf /tmp/rt.$b
  /tmp/quill.$b data build --input /tmp/tiny.jsonl --tokenizer $R --out /tmp/rt.$b --quiet --threads 1 --timing --row-tokens 32 2>&1 |
    grep "^  tokenizer load" | awk '{print $3}' >> /tmp/m.$b; done; done
echo "before $(med < /tmp/m.before)  after $(med < /tmp/m.after)"
echo "== data build end to end (cold), $C/all.timed.jsonl, MB/s of JSONL (median of $N)"
for t in 1 2; do
  for b in before after; do : > /tmp/m.$b; done
  for i in $(seq $N); do for b in before after; do rm -rf /tmp/rb.$b
    /tmp/quill.$b data build --input $C/all.timed.jsonl --tokenizer $R --row-tokens 8192 --out /tmp/rb.$b --quiet --threads $t 2>&1 >/dev/null |
      sed -n 's/.*(\([0-9.]*\) MB\/s end to end)/\1/p' >> /tmp/m.$b; done; done
  echo "threads $t: before $(med < /tmp/m.before)  after $(med < /tmp/m.after)"
done
