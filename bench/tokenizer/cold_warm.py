#!/usr/bin/env python3
"""Tokenizer speed cold and warm: quill against tiktoken on non-repeating natural text, same call.

    cold_warm.py --quill QUILL --ranks o200k_base.tiktoken --corpus DIR [--threads 1,16] [--reps 3]
                 [--work DIR] [--out-txt FILE] [--out-json FILE] [--no-tiktoken]

DIR is what tools/tokenizer/make_natural_corpus.py writes: for each kind of text (man pages, code,
prose, CJK) a `timed` and a `warm` half made of different files; "all" is the four timed halves one
after the other (and the four warm halves). What each measurement is, for quill and for tiktoken
alike, each rep in a fresh process (the tokenizer is loaded before the clock starts):
  cold   the first encode of the process, over the timed half: no cache has seen any of it
  warm   the timed half right after one untimed pass over the warm half (different files of the
         same kind): the steady state of a process that has been encoding such text
  hot    quill only, the old method of bench.py: the timed half again after a pass over itself
         (every piece already in the per-thread caches), median of 3 runs in one process
Threads: 1 is quill's single-thread encode and tiktoken's encode_ordinary on the whole text; N > 1
is quill's encode_parallel on N threads and tiktoken's encode_ordinary_batch on 64 KB chunks with
num_threads=N (bench.py's anchor). quill's ids are checked against tiktoken's single-thread ids
(SHA-256 of the ids as little-endian u32), cold and warm.
Then `quill data build` end to end (a fresh process, so always cold: JSONL conversations cut from
"all"'s timed text by make_corpus.py --jsonl, rows of 8,192), wall time including the tokenizer
load, against tiktoken's cold encode of the same text at the same thread count; with where its
time went (--timing: load, render, the threads' parse and tokenize time), the part of the wall time
its own timer does not see, and what a quill process that does nothing costs (`data build --help`).
Each figure is the median over --reps fresh processes; MB = 10^6 bytes. --no-tiktoken runs quill
alone (a dry run of the flow where tiktoken is not installed).
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
KINDS = ["man", "code", "prose", "cjk"]


def ids_sha256(ids):
    a = array.array("I", ids)
    if sys.byteorder != "little":
        a.byteswap()
    return hashlib.sha256(a.tobytes()).hexdigest()


def tiktoken_child(args):
    """One tiktoken measurement in this (fresh) process: prints one JSON line."""
    sys.path.insert(0, os.path.join(ROOT, "tools", "tokenizer"))
    from make_golden_ids import load_encoding
    enc, version = load_encoding(args.ranks)

    def encode(path):
        text = open(path, "rb").read().decode("utf-8", errors="replace")
        if args.child_threads == 1:
            t = time.perf_counter()
            ids = enc.encode_ordinary(text)
            return time.perf_counter() - t, ids
        chunks = [text[i:i + 65536] for i in range(0, len(text), 65536)]
        t = time.perf_counter()
        parts = enc.encode_ordinary_batch(chunks, num_threads=args.child_threads)
        return time.perf_counter() - t, [i for p in parts for i in p]

    if args.child_warm_up != "none":
        encode(args.child_warm_up)
    seconds, ids = encode(args.child_input)
    out = {"seconds": seconds, "tokens": len(ids), "version": version}
    if args.child_threads == 1:
        out["ids_sha256"] = ids_sha256(ids)
    print(json.dumps(out))
    return 0


def run_json(cmd, env=None):
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        sys.exit(f"cold_warm.py: {' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc


def median_of(runs):
    """The run with the median time (lower median for an even count), and all times."""
    runs = sorted(runs, key=lambda r: r["seconds"])
    return runs[(len(runs) - 1) // 2], [r["seconds"] for r in runs]


def cpu_line():
    name = platform.processor()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{name}, {os.cpu_count()} CPUs"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quill")
    ap.add_argument("--ranks", required=True)
    ap.add_argument("--corpus", help="make_natural_corpus.py's directory")
    ap.add_argument("--threads", default="1,16")
    ap.add_argument("--reps", type=int, default=3, help="fresh processes per figure (the median is reported)")
    ap.add_argument("--work", default="/tmp/quill-cold-warm")
    ap.add_argument("--out-txt")
    ap.add_argument("--out-json")
    ap.add_argument("--no-tiktoken", action="store_true", help="quill only (tiktoken is not installed here)")
    ap.add_argument("--sets", default=",".join(KINDS + ["all"]), help="which texts (kinds and/or all)")
    ap.add_argument("--no-build", action="store_true", help="skip the data build rows")
    # The tiktoken child process (internal).
    ap.add_argument("--tiktoken-child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--child-input", help=argparse.SUPPRESS)
    ap.add_argument("--child-warm-up", default="none", help=argparse.SUPPRESS)
    ap.add_argument("--child-threads", type=int, default=1, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.tiktoken_child:
        return tiktoken_child(args)
    if not args.quill or not args.corpus:
        ap.error("--quill and --corpus are required")
    started = time.perf_counter()
    threads = [int(t) for t in args.threads.split(",")]
    os.makedirs(args.work, exist_ok=True)
    manifest = json.load(open(os.path.join(args.corpus, "manifest.json")))
    lines = []

    def say(s=""):
        print(s, flush=True)
        lines.append(s)

    # The texts: each kind's halves, and "all" = the four halves one after the other.
    texts = {}
    for kind in KINDS:
        texts[kind] = {h: os.path.join(args.corpus, manifest["kinds"][kind][h]["file"]) for h in ("timed", "warm")}
    texts["all"] = {}
    for half in ("timed", "warm"):
        path = os.path.join(args.work, f"all.{half}.txt")
        with open(path, "wb") as f:
            for kind in KINDS:
                f.write(open(texts[kind][half], "rb").read())
        texts["all"][half] = path
    sets = args.sets.split(",")
    results = {"cpu": cpu_line(), "corpus": manifest, "threads": threads, "reps": args.reps, "rows": [], "build": []}
    results["corpus_sha256"] = {name: {h: hashlib.sha256(open(p, "rb").read()).hexdigest() for h, p in t.items()}
                                for name, t in texts.items()}

    def quill_encode(path, t, warm_up, repeat=None):
        cmd = [args.quill, "data", "bench-encode", "--tokenizer", args.ranks, "--special-tokens", "o200k",
               "--input", path, "--threads", str(t), "--warm-up", warm_up]
        if repeat:
            cmd += ["--repeat", str(repeat)]
        return run_json(cmd)[0]

    def tiktoken_encode(path, t, warm_up):
        cmd = [sys.executable, os.path.abspath(__file__), "--tiktoken-child", "--ranks", args.ranks,
               "--child-input", path, "--child-warm-up", warm_up, "--child-threads", str(t)]
        return run_json(cmd)[0]

    say(f"cpu {results['cpu']}; quill {args.quill}; reps {args.reps} (fresh processes, median)")
    say("text: " + "; ".join(
        f"{k} {manifest['kinds'][k]['timed']['bytes'] / 1e6:.1f} MB timed ({manifest['kinds'][k]['timed']['files']} files)"
        f" + {manifest['kinds'][k]['warm']['bytes'] / 1e6:.1f} MB warm-up" for k in KINDS))
    say("MB/s; ratio = quill / tiktoken (same mode, same threads); hot = quill on text it has just encoded")
    head = (f"{'text':6} {'thr':>3} | {'tiktoken cold':>13} {'warm':>6} | {'quill cold':>10} {'warm':>6} {'hot':>6} |"
            f" {'cold x':>6} {'warm x':>6} | ids")
    say(head)
    say("-" * len(head))
    all_equal = True
    tt_cold_all = {}
    for name in sets:
        timed, warm = texts[name]["timed"], texts[name]["warm"]
        mb = os.path.getsize(timed) / 1e6
        for t in threads:
            row = {"text": name, "threads": t, "bytes": os.path.getsize(timed)}
            for mode, warm_up in (("cold", "none"), ("warm", warm)):
                q, q_times = median_of([quill_encode(timed, t, warm_up) for _ in range(args.reps)])
                row[f"quill_{mode}"] = {"mb_per_s": mb / q["seconds"], "seconds": q_times, "ids_sha256": q["ids_sha256"],
                                        "parallel": q.get("parallel")}
                if not args.no_tiktoken:
                    k, k_times = median_of([tiktoken_encode(timed, t, warm_up) for _ in range(args.reps)])
                    row[f"tiktoken_{mode}"] = {"mb_per_s": mb / k["seconds"], "seconds": k_times,
                                               "ids_sha256": k.get("ids_sha256"), "version": k["version"]}
                    results["tiktoken_version"] = k["version"]
            hot = quill_encode(timed, t, "input", repeat=3)
            row["quill_hot"] = {"mb_per_s": mb / hot["seconds"], "seconds": hot["seconds_all"]}
            shas = {row["quill_cold"]["ids_sha256"], row["quill_warm"]["ids_sha256"], hot["ids_sha256"]}
            if not args.no_tiktoken:
                want = row.get("tiktoken_cold", {}).get("ids_sha256") if t == 1 else None
                if want is None:  # batch ids are not the whole text's: compare with the 1-thread row
                    want = next((r["tiktoken_cold"]["ids_sha256"] for r in results["rows"]
                                 if r["text"] == name and r["threads"] == 1), None)
                row["ids_equal_tiktoken"] = want is not None and shas == {want}
                ids = "= tiktoken" if row["ids_equal_tiktoken"] else ("DIFFER" if want else "?")
                if t == 1 or want:
                    all_equal = all_equal and row["ids_equal_tiktoken"]
                row["ratio_cold"] = row["quill_cold"]["mb_per_s"] / row["tiktoken_cold"]["mb_per_s"]
                row["ratio_warm"] = row["quill_warm"]["mb_per_s"] / row["tiktoken_warm"]["mb_per_s"]
                if name == "all":
                    tt_cold_all[t] = statistics.median(row["tiktoken_cold"]["seconds"])
                tt = f"{row['tiktoken_cold']['mb_per_s']:13.1f} {row['tiktoken_warm']['mb_per_s']:6.1f}"
                ratios = f"{row['ratio_cold']:5.2f}x {row['ratio_warm']:5.2f}x"
            else:
                row["ids_consistent"] = len(shas) == 1
                ids = "cold = warm = hot" if len(shas) == 1 else "DIFFER between modes"
                all_equal = all_equal and len(shas) == 1
                tt, ratios = f"{'-':>13} {'-':>6}", f"{'-':>6} {'-':>6}"
            results["rows"].append(row)
            say(f"{name:6} {t:>3} | {tt} | {row['quill_cold']['mb_per_s']:10.1f} {row['quill_warm']['mb_per_s']:6.1f} "
                f"{row['quill_hot']['mb_per_s']:6.1f} | {ratios} | {ids}")

    if not args.no_build and "all" in sets:
        jsonl = os.path.join(args.work, "all.timed.jsonl")
        subprocess.run([sys.executable, os.path.join(ROOT, "tools/tokenizer/make_corpus.py"), "--out", jsonl, "--jsonl",
                        "--from", texts["all"]["timed"], "--seed", "3"], check=True)
        jsonl_mb = os.path.getsize(jsonl) / 1e6
        # The cost of a quill process that does nothing (exec, libraries, static set-up, exit), for
        # comparison with the part of a build's wall time that its own --timing does not see.
        floor = []
        for _ in range(max(3, args.reps)):
            t0 = time.perf_counter()
            subprocess.run([args.quill, "data", "build", "--help"], capture_output=True, check=True)
            floor.append(time.perf_counter() - t0)
        results["process_floor_s"] = statistics.median(floor)
        # The rank file's built tables, kept next to it by the first quill load of this run (the
        # bench-encode rows above) and read back by every build below (docs/tokenizer.md,
        # "Loading"); QUILL_TOKENIZER_CACHE=0 in the environment makes every load build them.
        table_file = args.ranks + ".quill-tables"
        results["tokenizer_table_file"] = os.path.exists(table_file) and os.environ.get("QUILL_TOKENIZER_CACHE") != "0"
        say(f"quill data build end to end (fresh process: cold), {jsonl_mb:.1f} MB of JSONL cut from all's timed text;"
            " MB/s of JSONL; x = tiktoken's cold encode time of that text / the build's wall time;"
            f" a quill process that does nothing: {1000 * results['process_floor_s']:.1f} ms;"
            f" tokenizer tables {'read from ' + os.path.basename(table_file) if results['tokenizer_table_file'] else 'built'}")
        for t in threads:
            runs = []
            for rep in range(args.reps):
                out_dir = os.path.join(args.work, f"rows_t{t}")
                cmd = [args.quill, "data", "build", "--input", jsonl, "--tokenizer", args.ranks, "--row-tokens", "8192",
                       "--out", out_dir, "--quiet", "--threads", str(t), "--timing"]
                t0 = time.perf_counter()
                proc = subprocess.run(cmd, capture_output=True, text=True)
                wall = time.perf_counter() - t0
                if proc.returncode != 0:
                    sys.exit(f"cold_warm.py: {' '.join(cmd)} failed: {proc.stderr.strip()[-2000:]}")
                timing = next((json.loads(l[len("quill: data build timing "):]) for l in proc.stderr.splitlines()
                               if l.startswith("quill: data build timing ")), None)
                runs.append({"seconds": wall, "timing": timing, "rows_sha256": json.loads(proc.stdout)["rows_sha256"]})
            r, times = median_of(runs)
            b = {"threads": t, "jsonl_bytes": os.path.getsize(jsonl), "mb_per_s": jsonl_mb / r["seconds"], "seconds": times,
                 "timing": r["timing"], "rows_sha256": r["rows_sha256"]}
            phases = ""
            if r["timing"]:
                ph = {p["name"]: p["s"] for p in r["timing"]["phases"]}
                work = r["timing"].get("work_s", {})
                # outside: wall time the build's own timer does not see (process start and exit).
                b["outside_s"] = r["seconds"] - r["timing"]["total_s"]
                phases = (f"; tokenizer load {ph.get('tokenizer load', 0):.3f} s, "
                          f"render (parse + render + tokenize) {ph.get('render (parse + render + tokenize)', 0):.3f} s "
                          f"(thread time: parse {work.get('parse', 0):.3f}, tokenize {work.get('tokenize', 0):.3f}), "
                          f"outside the build's timer {b['outside_s']:.3f} s, of {r['seconds']:.3f} s")
            ratio = ""
            if t in tt_cold_all:  # times: the JSONL holds the same text, with JSON's quoting around it
                b["ratio_cold"] = tt_cold_all[t] / r["seconds"]
                ratio = f" ({b['ratio_cold']:.2f}x tiktoken cold)"
            results["build"].append(b)
            say(f"  {t:>3} threads: {b['mb_per_s']:7.1f} MB/s{ratio}{phases}")
        shas = {b["rows_sha256"] for b in results["build"]}
        say(f"  rows identical across thread counts: {len(shas) == 1}")
    results["ids_ok"] = all_equal
    results["elapsed_s"] = time.perf_counter() - started
    say(f"ids {'equal to tiktoken' if not args.no_tiktoken else 'consistent'} everywhere: {all_equal}; "
        f"{results['elapsed_s']:.0f} s")
    for path, content in ((args.out_txt, "\n".join(lines) + "\n"), (args.out_json, json.dumps(results, indent=1))):
        if path:
            with open(path + ".tmp", "w") as f:
                f.write(content)
            os.replace(path + ".tmp", path)
    return 0 if all_equal else 1


if __name__ == "__main__":
    sys.exit(main())
