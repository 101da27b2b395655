#!/usr/bin/env python3
"""Instruction mix of one kernel from Nsight Compute's SASS source page (CSV, as written by
scripts/gpu/ncu-attention-sass.sh): executed warp instructions and stall samples per opcode, and the
hottest address ranges.

    sass_mix.py FILE.csv[.gz] [--top 25]
"""
import argparse
import collections
import csv
import gzip
import io


def rows(path):
    raw = gzip.open(path, "rt") if path.endswith(".gz") else open(path)
    lines = [l for l in raw if l.startswith('"')]
    reader = csv.reader(io.StringIO("".join(lines)))
    header = None
    for r in reader:
        if r and r[0] == "Address":
            header = r
            continue
        if header and len(r) == len(header):
            yield dict(zip(header, r))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()
    by_op = collections.Counter()
    stall = collections.Counter()
    total = 0
    samples = 0
    for r in rows(a.file):
        src = r["Source"].strip()
        parts = src.split()
        if not parts:
            continue
        op = parts[1] if parts[0].startswith("@") and len(parts) > 1 else parts[0]
        op = op.split(".")[0]
        n = int(r["Instructions Executed"] or 0)
        s = int(r["Warp Stall Sampling (All Samples)"] or 0)
        by_op[op] += n
        stall[op] += s
        total += n
        samples += s
    print(f"{'opcode':12} {'warp instr':>14} {'%':>6} {'stall samples %':>16}")
    for op, n in by_op.most_common(a.top):
        print(f"{op:12} {n:14,d} {100 * n / total:6.1f} {100 * stall[op] / max(samples, 1):16.1f}")
    print(f"{'total':12} {total:14,d}")


if __name__ == "__main__":
    main()
