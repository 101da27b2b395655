#!/usr/bin/env python3
"""Folds Nsight Compute's source page (ncu --page source --csv --print-source sass, written by
scripts/gpu/ncu-attention-source.sh) into what a kernel's time is spent on: the warp-state samples and executed
instructions per opcode, and the hottest instructions with their neighbours' share.

Usage: attention-sass-hotspots.py FILE.csv[.gz] [--top N]
The columns are found by name (ncu's names vary across versions): the SASS text ("Source"), executed instructions
("Instructions Executed"), samples ("Warp Stall Sampling (All Samples)"), and every per-reason sample column
("stall_*" or "... Samples" per reason) where present.
"""
import csv
import gzip
import io
import sys
from collections import defaultdict


def open_text(path):
    raw = open(path, "rb").read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return io.StringIO(raw.decode("utf-8", errors="replace"))


def number(s):
    try:
        return float(s.replace(",", ""))
    except (ValueError, AttributeError):
        return 0.0


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    top = int(argv[argv.index("--top") + 1]) if "--top" in argv else 40
    text = open_text(argv[1])
    lines = text.read().splitlines()
    # The table starts at the header row holding "Source".
    start = next((i for i, l in enumerate(lines) if '"Source"' in l or l.startswith("Source,") or ',"Source",' in l), None)
    if start is None:
        print(f"{argv[1]}: no 'Source' header row; first lines:\n" + "\n".join(lines[:5]))
        return 1
    rows = list(csv.reader(lines[start:]))
    head = rows[0]
    col = {name: i for i, name in enumerate(head)}

    def find(*keys):
        for name, i in col.items():
            if all(k.lower() in name.lower() for k in keys):
                return i
        return None

    c_src = find("source")
    c_exec = find("instructions executed")
    c_samp = find("warp stall sampling", "all") or find("sampling", "all")
    reason_cols = [(n, i) for n, i in col.items() if "stall" in n.lower() and i not in (c_samp,) and "sampling" not in n.lower()]
    print(f"columns: source {c_src}, executed {c_exec}, samples {c_samp}, {len(reason_cols)} reason columns")
    body = [r for r in rows[1:] if len(r) == len(head)]
    total_s = sum(number(r[c_samp]) for r in body) if c_samp is not None else 0
    total_e = sum(number(r[c_exec]) for r in body) if c_exec is not None else 0
    print(f"{len(body)} SASS instructions, {total_s:.0f} samples, {total_e:.0f} warp instructions executed")

    by_op = defaultdict(lambda: [0.0, 0.0, 0])
    for r in body:
        src = r[c_src].strip()
        op = src.split()[0] if src else "?"
        if op.startswith("@"):
            op = src.split()[1] if len(src.split()) > 1 else op
        op = op.split(".")[0]
        by_op[op][0] += number(r[c_samp]) if c_samp is not None else 0
        by_op[op][1] += number(r[c_exec]) if c_exec is not None else 0
        by_op[op][2] += 1
    print("\nper opcode: samples %, executed %, static count")
    for op, (s, e, n) in sorted(by_op.items(), key=lambda kv: -kv[1][0])[:30]:
        print(f"  {op:12s} {100 * s / max(total_s, 1):6.2f}% {100 * e / max(total_e, 1):6.2f}% {n:5d}")

    print(f"\nhottest {top} instructions (index, samples %, executed, text, largest reasons)")
    order = sorted(range(len(body)), key=lambda i: -number(body[i][c_samp]) if c_samp is not None else 0)
    for i in order[:top]:
        r = body[i]
        reasons = sorted(((number(r[j]), n) for n, j in reason_cols), reverse=True)[:3]
        rs = ", ".join(f"{n.replace('stall_', '')} {v:.0f}" for v, n in reasons if v > 0)
        print(f"  {i:5d} {100 * number(r[c_samp]) / max(total_s, 1):6.2f}% {number(r[c_exec]) if c_exec is not None else 0:10.0f}  "
              f"{r[c_src].strip()[:70]:70s} {rs}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
