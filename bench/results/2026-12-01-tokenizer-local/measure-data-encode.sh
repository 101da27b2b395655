R=/work/wt-tokenizer/build/o200k_base.tiktoken; C=/tmp/nc; N=${N:-7}
med() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
mb=$(python3 -c "import os; print(os.path.getsize('$C/all.timed.txt')/1e6)")
jmb=$(python3 -c "import os; print(os.path.getsize('$C/all.timed.jsonl')/1e6)")
echo "text $mb MB ($C/all.timed.txt), JSONL $jmb MB ($C/all.timed.jsonl, the same text cut into conversations)"
for t in 1 2; do
  : > /tmp/m.base; : > /tmp/m.enc; : > /tmp/m.build
  for i in $(seq $N); do
    if [ $t = 1 ]; then s=$( { /usr/bin/time -f "%e" /tmp/quill.base data encode --tokenizer $R --special-tokens o200k < $C/all.timed.txt > /tmp/enc.base.json; } 2>&1 ); echo "$mb $s" | awk '{print $1/$2}' >> /tmp/m.base; fi
    s=$( { /usr/bin/time -f "%e" /tmp/quill.after data encode --tokenizer $R --special-tokens o200k --threads $t < $C/all.timed.txt > /tmp/enc.after.json; } 2>&1 ); echo "$mb $s" | awk '{print $1/$2}' >> /tmp/m.enc
    rm -rf /tmp/rb; /usr/bin/time -o /tmp/t.txt -f "%e" /tmp/quill.after data build --input $C/all.timed.jsonl --tokenizer $R --row-tokens 8192 --out /tmp/rb --quiet --threads $t >/dev/null 2>/dev/null; s=$(cat /tmp/t.txt); echo "$jmb $s" | awk '{print $1/$2}' >> /tmp/m.build
  done
  cmp -s /tmp/enc.base.json /tmp/enc.after.json && same=identical || same=DIFFERENT
  echo "threads $t: data encode before $( [ $t = 1 ] && med < /tmp/m.base || echo '(1 thread only)') -> after $(med < /tmp/m.enc) MB/s of text; data build $(med < /tmp/m.build) MB/s of JSONL; encode/build $(echo "$(med < /tmp/m.enc) $(med < /tmp/m.build)" | awk '{printf "%.2f", $1/$2}'); JSON output vs before: $same"
done
