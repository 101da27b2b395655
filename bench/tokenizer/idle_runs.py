#!/usr/bin/env python3
"""Timing commands on a shared machine: each run starts only after one second below 3% busy, and
is thrown away and repeated when other processes used more than 3% of the machine meanwhile.

    idle_runs.py ROUNDS LABEL 'COMMAND' [LABEL 'COMMAND' ...] [--clean 'DIR ...'] [--out FILE]

Runs the commands one after the other, ROUNDS times (so old and new alternate), and prints each
run's wall time; --clean removes those folders before every run, outside the timing (so that a
build always writes into a fresh folder). A command's stderr line "quill: data build timing {...}"
(quill data build --timing) is kept. --out writes {label: [{wall, cpu, timing}, ...]} as JSON and
the summary prints the median and best MB/s when --mb gives the input size.
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

HZ = os.sysconf("SC_CLK_TCK")
PREFIX = "quill: data build timing "


def busy_jiffies():
    fields = list(map(int, open("/proc/stat").readline().split()[1:]))
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


def wait_idle():
    while True:
        b0, t0 = busy_jiffies()
        time.sleep(1.0)
        b1, t1 = busy_jiffies()
        if (b1 - b0) / max(1, t1 - t0) < 0.03:
            return
        time.sleep(2)


def run_once(cmd, clean):
    while True:
        for d in clean:
            shutil.rmtree(d, ignore_errors=True)
        wait_idle()
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        b0, _ = busy_jiffies()
        t = time.perf_counter()
        p = subprocess.run(cmd, shell=True, capture_output=True, text=True)
        wall = time.perf_counter() - t
        b1, _ = busy_jiffies()
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        ours = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
        other = (b1 - b0) / HZ - ours
        if p.returncode != 0:
            sys.exit(f"{cmd}: exit {p.returncode}\n{p.stderr}")
        if other > 0.03 * wall * os.cpu_count():
            print(f"  (discarded: other processes used {other:.2f} s of CPU during {wall:.2f} s)", flush=True)
            continue
        timing = None
        for line in p.stderr.splitlines():
            if line.startswith(PREFIX):
                timing = json.loads(line[len(PREFIX):])
        return {"wall": wall, "cpu": ours, "timing": timing}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("rounds", type=int)
    ap.add_argument("pairs", nargs="+", help="LABEL COMMAND ...")
    ap.add_argument("--clean", default="")
    ap.add_argument("--out")
    ap.add_argument("--mb", type=float, help="input size in MB (10^6 bytes), for the summary")
    args = ap.parse_args()
    if len(args.pairs) % 2:
        sys.exit("expected LABEL COMMAND pairs")
    pairs = list(zip(args.pairs[::2], args.pairs[1::2]))
    results = {label: [] for label, _ in pairs}
    for r in range(args.rounds):
        for label, cmd in pairs:
            res = run_once(cmd, args.clean.split())
            results[label].append(res)
            print(f"round {r} {label:14} wall {res['wall']:.3f} s  cpu {res['cpu']:.3f} s", flush=True)
    for label, runs in results.items():
        walls = [x["wall"] for x in runs]
        line = f"{label:14} median {statistics.median(walls):.3f} s  best {min(walls):.3f} s"
        if args.mb:
            line += f"  ({args.mb / statistics.median(walls):.1f} MB/s median, {args.mb / min(walls):.1f} best)"
        print(line)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
