#!/usr/bin/env python3
"""One line per quill run directory: each step's wall time and passes time (summary.json's per_step), then the
summary keys asked for. A directory without a summary prints nothing (its run failed; its log says why).

Usage: run_steps.py DIR [--keys KEY ...]
"""
import json
import sys


def main(argv):
    d, keys = argv[0], argv[argv.index("--keys") + 1:] if "--keys" in argv else []
    try:
        s = json.load(open(f"{d}/summary.json"))
    except OSError:
        return
    steps = ", ".join(f"{p['step']}: {p['step_time_s'] * 1e3:.1f} ms (passes {p['passes_time_s'] * 1e3:.1f})"
                      for p in s["per_step"])
    extra = "".join(f"; {k} {s.get(k)}" for k in keys)
    print(f"  {d.rstrip('/').split('/')[-1]}: steps {steps}{extra}")


if __name__ == "__main__":
    main(sys.argv[1:])
