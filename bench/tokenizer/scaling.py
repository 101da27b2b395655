#!/usr/bin/env python3
"""Thread scaling of `quill data bench-encode` against the machine's own, in one short run.

    scaling.py --quill QUILL --ranks o200k_base.tiktoken [--corpus-mb 30] [--threads 1,2,4,8,16]
               [--processes 1,2,4,8,16] [--budget-s 210] [--jsonl FILE]

Prints compact tables (the GPU tool returns only the tail of the output), in this order:
  tiktoken    encode_ordinary on the whole corpus, one thread (the ratio; its ids' SHA-256 checks quill's)
  threads     quill at each thread count, default caches, with where the time went (below)
  machine     N independent processes at once: a Python integer loop (the probe of
              bench/results/2026-11-30-callE) and quill bench-encode on one thread each
  variants    at the most threads: v6's timing (--fresh-output), other chunk sizes
  caches      a sweep of the per-thread cache sizes (QUILL_BPE_*), at one thread and the most threads
Columns of the thread table, from bench-encode's "parallel" stats of the median run:
  util   thread-time spent encoding chunks / (threads x call time); 1 - util is wake-up, tail and
         serial time
  work   busy thread-time / the one-thread time: > 1 when each core gets slower as more run
         (shared L2/L3, memory, SMT siblings, clock); speed-up ~= threads x util / work
  resize, copy   the serial output sizing and the parallel copy (ms)
  wake, tail     idle thread-time before the first / after the last chunk, % of threads x call
The corpus is tools/tokenizer/make_corpus.py's mixed text (seed 11), as in bench.py. Every row is
the median of --repeat runs after a warm-up on the same text; MB = 10^6 bytes. So every quill figure
here is "hot" (the per-thread caches already hold every piece): right for how threads scale and
for the cache sizes, not for speed on new text, which cold_warm.py measures (cold and warm).
"""

import argparse
import array
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tools", "tokenizer"))

DEFAULT_CACHES = (65536, 65536, 16384)
# (front entries, pair slots, piece slots): one factor at a time around the default, then smaller
# combinations (the defaults were tuned on one thread; 16 copies may not fit the shared caches).
SWEEP = [DEFAULT_CACHES, (16384, 65536, 16384), (4096, 65536, 16384), (65536, 16384, 16384),
         (65536, 65536, 4096), (16384, 16384, 16384), (4096, 16384, 4096), (262144, 65536, 16384)]

START = time.perf_counter()
LOG = None


def elapsed():
    return time.perf_counter() - START


def say(line=""):
    print(line, flush=True)


def record(kind, **fields):
    if LOG:
        LOG.write(json.dumps({"kind": kind, **fields}) + "\n")
        LOG.flush()


def cache_kib(c):
    # Entry sizes: front 48 B, pair 8 B, piece slot 24 B (its arenas come on top).
    return (c[0] * 48 + c[1] * 8 + c[2] * 24) / 1024


def bench_encode(args, corpus, threads, caches=None, repeat=None, extra=()):
    env = dict(os.environ)
    if caches:
        env.update(QUILL_BPE_FRONT_ENTRIES=str(caches[0]), QUILL_BPE_PAIR_SLOTS=str(caches[1]),
                   QUILL_BPE_PIECE_SLOTS=str(caches[2]))
    cmd = [args.quill, "data", "bench-encode", "--tokenizer", args.ranks, "--special-tokens", "o200k", "--input",
           corpus, "--threads", str(threads), "--repeat", str(repeat or args.repeat), *extra]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env, timeout=120).stdout
    return json.loads(out)


def spin_probe(n_procs, iterations):
    """callE's probe: n Python processes each timing the same integer loop; summed rate / one's."""
    code = ("import time\nt=time.perf_counter()\nx=0\nfor i in range(%d): x=(x*31+i)&0xFFFFFFFF\n"
            "print(time.perf_counter()-t)" % iterations)
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) for _ in range(n_procs)]
    return sum(iterations / float(p.communicate()[0]) for p in procs)


def quill_processes(args, corpus, n_procs):
    """n independent quill processes on one thread each, started together: summed MB/s."""
    cmd = [args.quill, "data", "bench-encode", "--tokenizer", args.ranks, "--special-tokens", "o200k", "--input",
           corpus, "--threads", "1", "--repeat", str(args.process_repeat)]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) for _ in range(n_procs)]
    rates = [json.loads(p.communicate(timeout=180)[0])["mb_per_s"] for p in procs]
    return sum(rates), min(rates), max(rates)


def tiktoken_single(args, corpus):
    try:
        from make_golden_ids import load_encoding
        enc, version = load_encoding(args.ranks)
    except Exception as e:  # noqa: BLE001 - any failure only skips this row
        say(f"tiktoken: not available ({type(e).__name__}: {e}); skipped")
        return None, None
    data = open(corpus, "rb").read()
    text = data.decode("utf-8", errors="replace")
    enc.encode_ordinary(text)  # warm-up
    times = []
    for _ in range(args.tiktoken_repeat):
        t = time.perf_counter()
        ids = enc.encode_ordinary(text)
        times.append(time.perf_counter() - t)
    a = array.array("I", ids)
    if sys.byteorder != "little":
        a.byteswap()
    mbs = len(data) / 1e6 / statistics.median(times)
    say(f"tiktoken {version} encode_ordinary, 1 thread: {mbs:.1f} MB/s ({len(ids)} ids)")
    record("tiktoken", version=version, mb_per_s=mbs, seconds_all=times)
    return mbs, hashlib.sha256(a.tobytes()).hexdigest()


def parallel_cols(r, t1_seconds):
    p = r.get("parallel", {})
    thr = max(1, p.get("threads", 1))
    call = max(p.get("seconds", r["seconds"]), 1e-12)
    util = p.get("busy_s", 0) / (thr * call)
    work = p.get("busy_s", 0) / t1_seconds if t1_seconds else float("nan")
    return (f"{util:5.3f} {work:5.2f} {1e3 * p.get('resize_s', 0):7.2f} {1e3 * p.get('copy_s', 0):6.2f} "
            f"{100 * p.get('start_idle_s', 0) / (thr * call):5.1f}% {100 * p.get('end_idle_s', 0) / (thr * call):5.1f}% "
            f"{p.get('chunks', 0):6d}")


def main():
    global LOG
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quill", required=True)
    ap.add_argument("--ranks", required=True)
    ap.add_argument("--corpus", help="instead of generating the mixed corpus")
    ap.add_argument("--corpus-mb", type=float, default=30)
    ap.add_argument("--work", default="/tmp/quill-scaling")
    ap.add_argument("--threads", default="1,2,4,8,16")
    ap.add_argument("--processes", default="1,2,4,8,16")
    ap.add_argument("--repeat", type=int, default=5, help="bench-encode runs per thread-count row")
    ap.add_argument("--sweep-repeat", type=int, default=3)
    ap.add_argument("--process-repeat", type=int, default=3)
    ap.add_argument("--tiktoken-repeat", type=int, default=2)
    ap.add_argument("--spin-iterations", type=int, default=10_000_000)
    ap.add_argument("--budget-s", type=float, default=210, help="skip the rest of the cache sweep past this")
    ap.add_argument("--jsonl", help="every raw result, one JSON object a line")
    args = ap.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    procs = [int(n) for n in args.processes.split(",")]
    top = max(threads)
    LOG = open(args.jsonl, "w") if args.jsonl else None
    os.makedirs(args.work, exist_ok=True)

    corpus = args.corpus
    if not corpus:
        corpus = os.path.join(args.work, f"corpus_{args.corpus_mb:g}mb.txt")
        if not os.path.exists(corpus):
            subprocess.run([sys.executable, os.path.join(ROOT, "tools/tokenizer/make_corpus.py"), "--out", corpus,
                            "--bytes", str(int(args.corpus_mb * 1e6)), "--seed", "11"], check=True)
    say(f"corpus {corpus}: {os.path.getsize(corpus) / 1e6:.1f} MB ({elapsed():.0f} s)")

    tt_mbs, tt_sha = tiktoken_single(args, corpus)

    say(f"== quill threads, default caches (median of {args.repeat}; util/work/resize/copy/wake/tail: see scaling.py)")
    say("thr    MB/s      x1  util  work  resize   copy  wake   tail  chunks")
    t1 = None
    by_threads = {}
    for t in threads:
        r = bench_encode(args, corpus, t)
        record("threads", **r)
        by_threads[t] = r
        if t1 is None:
            t1 = r
        say(f"{t:3d} {r['mb_per_s']:7.1f} {r['mb_per_s'] / t1['mb_per_s']:7.2f} {parallel_cols(r, t1['seconds'])}")
    shas = {r["ids_sha256"] for r in by_threads.values()}
    base = by_threads[threads[0]]
    same = tt_sha is None or all(r["ids_sha256"] == tt_sha for r in by_threads.values())
    if tt_mbs:
        say(f"quill {threads[0]} thread / tiktoken: {base['mb_per_s'] / tt_mbs:.2f}x; ids equal tiktoken's: {same}")
    else:
        say(f"ids equal across thread counts: {len(set(r['ids_sha256'] for r in by_threads.values())) == 1}")
    say(f"({elapsed():.0f} s)")

    say("== machine: N independent processes at once (python loop = callE's probe; quill 1 thread each)")
    say("procs  python-x  quill MB/s (sum)  quill-x  slowest/fastest MB/s")
    spin1 = q1 = None
    for n in procs:
        spin = spin_probe(n, args.spin_iterations)
        spin1 = spin1 or spin
        qsum, qmin, qmax = quill_processes(args, corpus, n)
        q1 = q1 or qsum
        record("processes", n=n, spin_rate=spin, quill_mb_per_s_sum=qsum, quill_min=qmin, quill_max=qmax)
        say(f"{n:5d} {spin / spin1:8.2f}x {qsum:17.1f} {qsum / q1:7.2f}x  {qmin:.1f}/{qmax:.1f}")
    say(f"({elapsed():.0f} s)")

    say(f"== variants at {top} threads (median of {args.repeat})")
    for label, extra in [("fresh output vector each run (v6's timing)", ["--fresh-output"]),
                         ("chunks of 256 KiB (v6's granularity at 16 threads)", ["--chunk-kb", "256"]),
                         ("chunks of 16 KiB", ["--chunk-kb", "16"])]:
        r = bench_encode(args, corpus, top, extra=extra)
        record("variant", label=label, **r)
        shas.add(r["ids_sha256"])
        say(f"{top:3d} {r['mb_per_s']:7.1f} {r['mb_per_s'] / t1['mb_per_s']:7.2f} {parallel_cols(r, t1['seconds'])}  {label}")
    say(f"({elapsed():.0f} s)")

    say(f"== per-thread cache sizes (QUILL_BPE_FRONT_ENTRIES/PAIR_SLOTS/PIECE_SLOTS), median of {args.sweep_repeat}")
    say(f"front/pair/piece         KiB/thr   1 thr MB/s  {top} thr MB/s   x1   util  work")
    for c in SWEEP:
        if elapsed() > args.budget_s:
            say(f"{'/'.join(map(str, c)):24} skipped: past the {args.budget_s:.0f} s budget")
            continue
        one = bench_encode(args, corpus, 1, caches=c, repeat=args.sweep_repeat)
        many = bench_encode(args, corpus, top, caches=c, repeat=args.sweep_repeat)
        record("caches", caches=c, one=one, many=many)
        shas.update([one["ids_sha256"], many["ids_sha256"]])
        cols = parallel_cols(many, one["seconds"]).split()
        say(f"{'/'.join(map(str, c)):24} {cache_kib(c):7.0f} {one['mb_per_s']:12.1f} {many['mb_per_s']:12.1f} "
            f"{many['mb_per_s'] / one['mb_per_s']:6.2f} {cols[0]} {cols[1]}")
    versus = "not checked (no tiktoken)" if tt_sha is None else same
    say(f"ids identical in every quill run: {len(shas) == 1}; equal tiktoken's: {versus}; done in {elapsed():.0f} s")
    return 0 if same and len(shas) == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
