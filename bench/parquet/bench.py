#!/usr/bin/env python3
"""quill data build from Parquet against the same conversations as JSONL (bench/parquet/README.md).

    bench.py --quill build/quill --ranks build/o200k_base.tiktoken --npm WORK/node_modules
             [--work DIR] [--corpus-mb 20] [--copies 3] [--rounds 5] [--threads 1,2] [--out-json FILE]

The input: tools/tokenizer/make_corpus.py's mixed-script corpus (--corpus-mb MB, seed 5) cut into
conversations (--jsonl, seed 3), reduced to Tulu 3's shape (id, messages [{role, content}],
source) and repeated --copies times by make_input.mjs, which writes the JSONL twin and the same
conversations as Parquet through parquet-wasm (arrow-rs), snappy and zstd, dictionary pages, row
groups of 1,000 rows. Each round builds every input at every thread count, one after the other
(so the inputs alternate), into a fresh folder, with the o200k ranks and the Inkling specials,
8,192-token rows, --timing. Reported per input and thread count: the median and best wall time,
MB/s of the input's own bytes and of the JSONL twin's bytes (the same conversations, so the
figures compare directly), and the reading front end alone (JSONL: mapping, line splitting and
JSON parsing; Parquet: footers, column chunks, assembly and filling the conversations) from the
build's own --timing. Every build must give the same rows_sha256.
"""

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PREFIX = "quill: data build timing "


def load_average():
    return open("/proc/loadavg").read().split()[0]


def run_build(quill, ranks, path, threads, out_dir):
    shutil.rmtree(out_dir, ignore_errors=True)
    cmd = [quill, "data", "build", "--input", path, "--tokenizer", ranks, "--row-tokens", "8192", "--quiet",
           "--threads", str(threads), "--timing", "--out", out_dir]
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)}: exit {p.returncode}\n{p.stderr}")
    timing = next(json.loads(l[len(PREFIX):]) for l in p.stderr.splitlines() if l.startswith(PREFIX))
    manifest = json.loads(p.stdout)
    return {"wall": wall, "cpu": (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime), "timing": timing,
            "rows": manifest["rows"], "rows_sha256": manifest["rows_sha256"], "load": load_average()}


def front_end_seconds(timing):
    """The reading of the conversations: the reader's phases plus the parse work (thread time)."""
    phases = sum(p["s"] for p in timing["phases"] if p["name"].startswith("parquet:") or p["name"] == "map + split lines")
    return phases, timing["work_s"].get("parse", 0.0)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quill", required=True)
    ap.add_argument("--ranks", required=True)
    ap.add_argument("--npm", required=True, help="node_modules with parquet-wasm@0.8.0 and apache-arrow@21.2.0")
    ap.add_argument("--work", default="/tmp/quill-parquet-bench")
    ap.add_argument("--corpus-mb", type=float, default=20)
    ap.add_argument("--copies", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--out-json")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    corpus = os.path.join(args.work, "corpus.txt")
    conv = os.path.join(args.work, "conversations.jsonl")
    make_corpus = os.path.join(ROOT, "tools/tokenizer/make_corpus.py")
    subprocess.run([sys.executable, make_corpus, "--out", corpus, "--bytes", str(int(args.corpus_mb * 1e6)), "--seed",
                    "5"], check=True)
    subprocess.run([sys.executable, make_corpus, "--out", conv, "--jsonl", "--from", corpus, "--seed", "3"], check=True)
    subprocess.run(["node", os.path.join(ROOT, "bench/parquet/make_input.mjs"), "--npm", args.npm, "--input", conv,
                    "--copies", str(args.copies), "--out", args.work], check=True)
    inputs = {"jsonl": "bench.jsonl", "parquet-snappy": "bench-snappy.parquet", "parquet-zstd": "bench-zstd.parquet"}
    paths = {k: os.path.join(args.work, v) for k, v in inputs.items()}
    sizes = {k: os.path.getsize(p) for k, p in paths.items()}
    jsonl_mb = sizes["jsonl"] / 1e6
    threads = [int(t) for t in args.threads.split(",")]
    runs = {(k, t): [] for t in threads for k in inputs}
    for r in range(args.rounds):
        for t in threads:
            for k in inputs:
                res = run_build(args.quill, args.ranks, paths[k], t, os.path.join(args.work, "rows"))
                runs[(k, t)].append(res)
                print(f"round {r} {k:15} threads {t}: {res['wall']:.3f} s (load {res['load']})", flush=True)
    shas = {res["rows_sha256"] for rs in runs.values() for res in rs}
    print(f"\ninput: {sizes['jsonl']} bytes of JSONL, {sizes['parquet-snappy']} snappy Parquet, "
          f"{sizes['parquet-zstd']} zstd Parquet; rows_sha256 {'identical' if len(shas) == 1 else 'DIFFER: ' + str(shas)}")
    print(f"{'input':15} {'threads':>7} {'median s':>9} {'best s':>8} {'MB/s own':>9} {'MB/s JSONL-eq':>13} "
          f"{'front end s':>11} {'front MB/s JSONL-eq':>19}")
    summary = []
    for (k, t), rs in runs.items():
        walls = [x["wall"] for x in rs]
        med = statistics.median(walls)
        # The front end at one thread only: its phases' wall time and the parse work summed over
        # the threads then measure the same thing.
        front = statistics.median([sum(front_end_seconds(x["timing"])) for x in rs]) if t == 1 else None
        row = {"input": k, "threads": t, "bytes": sizes[k], "median_s": med, "best_s": min(walls),
               "mb_per_s_own": sizes[k] / 1e6 / med, "mb_per_s_jsonl_equivalent": jsonl_mb / med,
               "front_end_s": front, "front_end_mb_per_s_jsonl_equivalent": jsonl_mb / front if front else None,
               "walls": walls, "loads": [x["load"] for x in rs], "rows": rs[0]["rows"]}
        summary.append(row)
        fe = f"{front:11.3f} {row['front_end_mb_per_s_jsonl_equivalent']:19.1f}" if front else f"{'':11} {'':19}"
        print(f"{k:15} {t:7} {med:9.3f} {min(walls):8.3f} {row['mb_per_s_own']:9.1f} "
              f"{row['mb_per_s_jsonl_equivalent']:13.1f} {fe}")
    if args.out_json:
        with open(args.out_json, "w") as f:
            json.dump({"sizes": sizes, "rows_sha256": sorted(shas), "summary": summary,
                       "runs": {f"{k}/t{t}": rs for (k, t), rs in runs.items()}}, f, indent=1)


if __name__ == "__main__":
    main()
