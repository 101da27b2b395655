#!/usr/bin/env python3
"""Tokenizer speed: quill against tiktoken on the same text, on the same machine.

    bench.py --quill QUILL --ranks o200k_base.tiktoken [--corpus FILE | --corpus-mb 30] [--work DIR]
             [--threads 1,4,16] [--out-json FILE]

Measures, on two corpora read as bytes: "mixed" (tools/tokenizer/make_corpus.py, 30 MB: many
scripts, emoji, code, long whitespace runs) and "code" (this Python's standard library source, 20 MB):
  tiktoken  encode_ordinary on the whole text, one thread
  tiktoken  encode_ordinary_batch on 64 KB chunks with 1, 4 and 16 threads (performance.md's anchor)
  quill     `quill data bench-encode` with 1 thread and with each thread count (exact cuts, same ids),
            twice: "cold" (a fresh process's first encode: --warm-up none) and "hot" (the same text
            again after a pass over it, median of --repeat: every piece is then in the per-thread
            caches, and the mixed corpus repeats its code snippets and sentences verbatim, so this
            is a best case; the README's figures up to v8 were these)
The honest figures are cold_warm.py's (cold-warm.sh): non-repeating natural text, cold and warm.
  quill     `quill data build` end to end (conversations cut from the mixed corpus, repeated
            --build-copies times, -> rows of 8192), all threads and one thread, MB/s of JSONL input;
            with `--timing`, so each build row also says where its time went (the median run's
            phases, serial fraction and Amdahl projection, in the JSON as "timing")
Each figure is the median of --repeat runs after a warm-up; MB = 10^6 bytes. quill's ids are
checked against tiktoken's (SHA-256 of the ids as little-endian u32). Prints a table.
tiktoken needs the rank file (the machine may have no network): the encoding is built from it as
tools/tokenizer/make_golden_ids.py does.
"""

import argparse
import array
import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tools", "tokenizer"))


def timed(fn, repeat):
    fn()  # warm-up
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def ids_sha256(ids):
    a = array.array("I", ids)
    if sys.byteorder != "little":
        a.byteswap()
    return hashlib.sha256(a.tobytes()).hexdigest()


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def python_stdlib_corpus(path, limit):
    """Real text: the .py files of this Python's standard library, sorted, up to `limit` bytes."""
    import glob
    import sysconfig
    out = bytearray()
    for f in sorted(glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "**", "*.py"), recursive=True)):
        out += open(f, "rb").read()
        if len(out) >= limit:
            break
    with open(path, "wb") as f:
        f.write(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quill", required=True)
    ap.add_argument("--ranks", required=True)
    ap.add_argument("--corpus", help="instead of the generated corpus")
    ap.add_argument("--corpus-mb", type=float, default=30)
    ap.add_argument("--code-mb", type=float, default=20, help="also the Python standard library's source (0: skip)")
    ap.add_argument("--build-copies", type=int, default=4, help="the build's JSONL is the corpus' conversations this many times")
    ap.add_argument("--work", default="/tmp/quill-tokenizer-bench")
    ap.add_argument("--threads", default="1,4,16")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out-json")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    threads = [int(t) for t in args.threads.split(",")]
    results = {"cpu": cpu_name(), "cores": os.cpu_count(), "rows": []}

    corpus = args.corpus
    if not corpus:
        corpus = os.path.join(args.work, f"corpus_{args.corpus_mb:g}mb.txt")
        subprocess.run([sys.executable, os.path.join(ROOT, "tools/tokenizer/make_corpus.py"), "--out", corpus,
                        "--bytes", str(int(args.corpus_mb * 1e6)), "--seed", "11"], check=True)
    corpora = [("mixed", corpus)]
    if args.code_mb > 0:
        code = os.path.join(args.work, "python_stdlib.txt")
        python_stdlib_corpus(code, int(args.code_mb * 1e6))
        corpora.append(("code", code))

    from make_golden_ids import load_encoding
    enc, version = load_encoding(args.ranks)
    results["tiktoken_version"] = version
    print(f"cpu {results['cpu']} ({results['cores']} cores); tiktoken {version}")
    print(f"  {'corpus':6} {'who':9} {'what':40} {'threads':>7} {'speed':>14}")
    exact = True
    for label, path in corpora:
        data = open(path, "rb").read()
        text = data.decode("utf-8", errors="replace")
        mb = len(data) / 1e6
        results.setdefault("corpora", {})[label] = {"path": path, "bytes": len(data),
                                                    "sha256": hashlib.sha256(data).hexdigest()}

        def row(who, what, thr, seconds, note=""):
            r = {"corpus": label, "who": who, "what": what, "threads": thr, "seconds": seconds,
                 "mb_per_s": mb / seconds, "note": note}
            results["rows"].append(r)
            print(f"  {label:6} {who:9} {what:40} {thr:>7} {r['mb_per_s']:9.1f} MB/s  {note}", flush=True)
            return r

        s, ids = timed(lambda: enc.encode_ordinary(text), args.repeat)
        want_sha = ids_sha256(ids)
        tt_single = row("tiktoken", "encode_ordinary, whole text", 1, s, f"{mb:.1f} MB, {len(ids)} ids")
        chunks = [text[i:i + 65536] for i in range(0, len(text), 65536)]
        for t in threads:
            s, _ = timed(lambda: enc.encode_ordinary_batch(chunks, num_threads=t), args.repeat)
            row("tiktoken", "encode_ordinary_batch, 64 KB chunks", t, s)
        for t in sorted(set([1] + threads)):
            for mode, extra in (("cold", ["--warm-up", "none"]), ("hot", ["--repeat", str(args.repeat)])):
                out = subprocess.run([args.quill, "data", "bench-encode", "--tokenizer", args.ranks, "--special-tokens",
                                      "o200k", "--input", path, "--threads", str(t)] + extra,
                                     check=True, capture_output=True, text=True).stdout
                r = json.loads(out)
                same = r["ids_sha256"] == want_sha
                exact = exact and same
                q = row("quill", f"data bench-encode, {mode}", r["threads"], r["seconds"],
                        "ids = tiktoken's" if same else f"IDS DIFFER ({r['tokens']} ids)")
                if t == 1:
                    results[f"{label}_quill_{mode}_vs_tiktoken_single_thread"] = q["mb_per_s"] / tt_single["mb_per_s"]
    results["quill_ids_match_tiktoken"] = exact

    one = os.path.join(args.work, "conversations_1.jsonl")
    subprocess.run([sys.executable, os.path.join(ROOT, "tools/tokenizer/make_corpus.py"), "--out", one, "--jsonl",
                    "--from", corpus, "--seed", "3"], check=True)
    jsonl = os.path.join(args.work, "conversations.jsonl")
    with open(jsonl, "wb") as f:
        part = open(one, "rb").read()
        for _ in range(args.build_copies):
            f.write(part)
    jsonl_mb = os.path.getsize(jsonl) / 1e6
    for t in [0, 1]:
        out_dir = os.path.join(args.work, f"rows_t{t}")
        cmd = [args.quill, "data", "build", "--input", jsonl, "--tokenizer", args.ranks, "--row-tokens", "8192",
               "--out", out_dir, "--quiet", "--threads", str(t), "--timing"]
        runs = []
        for _ in range(max(1, args.repeat - 1)):
            t0 = time.perf_counter()
            proc = subprocess.run(cmd, check=True, capture_output=True, text=True)
            runs.append((time.perf_counter() - t0, proc))
        runs.sort(key=lambda r: r[0])
        s, proc = runs[len(runs) // 2]
        manifest = json.loads(proc.stdout)
        timing = None
        for line in proc.stderr.splitlines():
            if line.startswith("quill: data build timing "):
                timing = json.loads(line[len("quill: data build timing "):])
        r = {"corpus": "jsonl", "who": "quill", "what": "data build end to end (JSONL -> rows)",
             "threads": t or os.cpu_count(), "seconds": s, "mb_per_s": jsonl_mb / s,
             "note": f"{jsonl_mb:.1f} MB JSONL, {manifest['rows']} rows", "timing": timing}
        results["rows"].append(r)
        print(f"  {'jsonl':6} {'quill':9} {r['what']:40} {r['threads']:>7} {r['mb_per_s']:9.1f} MB/s  {r['note']}",
              flush=True)
        if timing:  # the median run's breakdown; the process' own start and exit are the difference to `s`
            phases = ", ".join(f"{p['name']} {p['s']:.3f}" for p in timing["phases"] if p["s"] >= 0.0005)
            print(f"         timing (s, in-process {timing['total_s']:.3f} of {s:.3f} wall): {phases}; "
                  f"serial {100 * timing['serial_fraction']:.1f}%, Amdahl at 16 threads {timing['amdahl_16']:.2f}x",
                  flush=True)
        results.setdefault("build_rows_sha256", []).append(manifest["rows_sha256"])

    ratios = ", ".join(f"{label} {results[f'{label}_quill_cold_vs_tiktoken_single_thread']:.2f}x cold, "
                       f"{results[f'{label}_quill_hot_vs_tiktoken_single_thread']:.2f}x hot" for label, _ in corpora)
    print(f"quill single-thread / tiktoken encode_ordinary: {ratios}; ids identical: {exact}; "
          f"build identical across thread counts: {len(set(results['build_rows_sha256'])) == 1}")
    if args.out_json:
        with open(args.out_json, "w") as f:
            json.dump(results, f, indent=2)
    return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(main())
