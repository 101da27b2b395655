#!/usr/bin/env python3
"""Whether quill runs computed the same numbers: each run's loss and gradient norm per step (metrics.jsonl)
against the first run's. Prints one line per later run: "the same losses and gradient norms as FIRST at steps
..." when every value is equal to the bit, else the largest relative difference and where. A performance path
(an overlap, recompute, a kernel choice that keeps the sums' order) must show the first; a numerics option shows
how far it moves the result. A run without metrics prints that it has none (its run failed; its log says why).

Usage: same_numbers.py DIR DIR [DIR ...]
"""
import json
import sys


def read(d):
    try:
        with open(f"{d}/metrics.jsonl") as f:
            rows = [json.loads(line) for line in f if line.strip()]
    except OSError:
        return None
    return {r["step"]: (r["loss"], r["grad_norm"]) for r in rows if "loss" in r and "grad_norm" in r}


def name(d):
    return "/".join(d.rstrip("/").split("/")[-2:])


def main(dirs):
    first = read(dirs[0])
    if first is None:
        print(f"  {name(dirs[0])}: no metrics")
        return
    for d in dirs[1:]:
        other = read(d)
        if other is None:
            print(f"  {name(d)}: no metrics")
            continue
        steps = sorted(set(first) & set(other))
        worst, where = 0.0, None
        for s in steps:
            for what, a, b in (("loss", first[s][0], other[s][0]), ("gradient norm", first[s][1], other[s][1])):
                rel = abs(a - b) / max(abs(a), 1e-30)
                if rel > worst:
                    worst, where = rel, f"{what} at step {s}: {b!r} against {a!r}"
        if where is None:
            print(f"  {name(d)}: the same losses and gradient norms as {name(dirs[0])} at steps {steps}")
        else:
            print(f"  {name(d)}: largest relative difference from {name(dirs[0])} {worst:.3g}, {where}")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(sys.argv[1:])
