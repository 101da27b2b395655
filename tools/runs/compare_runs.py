#!/usr/bin/env python3
"""Per-step losses of runs against a reference run (their metrics.jsonl), side by side: the relative loss
difference, step times, peak GPU memory, whether the per-expert counts agree; then each run's largest
difference. Used by the one-GPU layout checks (scripts/gpu/*-check.sh).

Usage: compare_runs.py REFERENCE_DIR RUN_DIR [RUN_DIR ...]
"""
import json
import os
import sys


def rows(run_dir):
    try:
        with open(os.path.join(run_dir, "metrics.jsonl")) as f:
            return [json.loads(line) for line in f]
    except OSError:
        return []


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    ref_dir, runs = sys.argv[1], sys.argv[2:]
    ref = rows(ref_dir)
    for run in runs:
        got = rows(run)
        name = os.path.basename(run.rstrip("/"))
        if not got:
            print(f"{name}: no metrics")
            continue
        worst, counts_equal = 0.0, True
        print(f"{name}: step  loss-reference  loss-{name}  rel       step-ms ref / {name}  peak GiB ref / {name}")
        for a, b in zip(ref, got):
            d = abs(a["loss"] - b["loss"]) / abs(a["loss"])
            worst = max(worst, d)
            counts_equal &= a.get("expert_tokens") == b.get("expert_tokens")
            pa, pb = (x.get("peak_gpu_bytes", -1) / 2**30 for x in (a, b))
            print(f"      {a['step']:4d}  {a['loss']:.6f}  {b['loss']:.6f}  {d:.2e}  "
                  f"{1000 * a['step_time_s']:.0f} / {1000 * b['step_time_s']:.0f}  {pa:.1f} / {pb:.1f}")
        # bf16 routing may flip a near-tied expert choice, so the counts are reported, not asserted.
        print(f"{name}: {min(len(ref), len(got))} steps, max rel loss difference {worst:.3e}, "
              f"expert counts equal: {counts_equal}")


if __name__ == "__main__":
    main()
