#!/usr/bin/env python3
"""Compare a candidate training run (quill) with the reference (transformers) for issue 3's figures.

Usage:
    python3 tools/parity/compare.py --candidate QUILL/metrics.jsonl --reference REF/metrics.jsonl \
        [--reference2 REF2/metrics.jsonl] \
        [--candidate-grads QUILL/grads_step0.safetensors --reference-grads REF/grads_step0.safetensors] \
        [--grad-errors REF/grad_errors_step0.json] [--reference-grad-noise REF2/grad_noise_step0.json] \
        [--json OUT.json]

Prints the per-step losses side by side, the convergence check of recipes-and-measurement.md §4 (candidate
against reference; the same rules as quill's src/recipe/convergence.cc), the strict maximum relative loss
difference over all steps, the reference's own run-to-run maximum relative difference (--reference2), and the
per-tensor relative L2 error of the step's gradients (||c - r|| / ||r||, every tensor of both files, checkpoint
names). Exit 0 when the figures are met:
  - the convergence check passes;
  - strict max relative loss difference <= --strict-tol (1e-2) and, with --reference2, <= --noise-factor (3) times
    the reference's own run-to-run max relative difference;
  - with gradient files: every tensor's relative L2 error <= --grad-tol (2e-2), same tensor names and shapes.
    Instead of the two files, --grad-errors takes the per-tensor errors that train_reference.py --compare-grads
    computed in process (same definition); the files win when both are given.
Exit 1 when a figure is missed, 2 on unusable input. Needs numpy only for the gradient files.
"""

import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from parity_io import (ParityError, SafetensorsReader, convergence_check, max_relative_difference,  # noqa: E402
                       read_metrics, relative_diff)


def fmt(x, spec=".6f"):
    if x is None:
        return "-"
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    return format(x, spec)


def grad_errors(cand_path, ref_path, chunk=1 << 24):
    import numpy as np

    c, r = SafetensorsReader(cand_path), SafetensorsReader(ref_path)
    ck, rk = set(c.keys()), set(r.keys())
    problems = []
    if ck != rk:
        problems.append(f"tensor names differ: only in candidate {sorted(ck - rk)[:20]}, only in reference "
                        f"{sorted(rk - ck)[:20]}")
    errs = {}
    for name in sorted(ck & rk):
        if c.shape(name) != r.shape(name):
            problems.append(f"{name}: candidate shape {c.shape(name)}, reference {r.shape(name)}")
            errs[name] = float("nan")
            continue
        num = den = cn = 0.0
        finite = True
        for a, b in zip(c.f32_chunks(name, chunk), r.f32_chunks(name, chunk)):
            if not (np.isfinite(a).all() and np.isfinite(b).all()):
                finite = False
                break
            d = a - b
            num += float(np.dot(d, d))
            den += float(np.dot(b, b))
            cn += float(np.dot(a, a))
        if not finite:
            errs[name] = float("nan")
            problems.append(f"{name}: non-finite gradient values")
        elif den > 0:
            errs[name] = math.sqrt(num / den)
        else:
            errs[name] = math.sqrt(cn)  # reference is all zero: the candidate's norm
    return errs, problems


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--candidate", required=True, help="candidate metrics.jsonl (quill)")
    ap.add_argument("--reference", required=True, help="reference metrics.jsonl (transformers)")
    ap.add_argument("--reference2", help="a second reference run (its run-to-run noise)")
    ap.add_argument("--candidate-grads")
    ap.add_argument("--reference-grads")
    ap.add_argument("--grad-errors", help="train_reference.py's grad_errors_step{K}.json (instead of the files)")
    ap.add_argument("--reference-grad-noise", help="train_reference.py's grad_noise_step{K}.json (reported only)")
    ap.add_argument("--strict-tol", type=float, default=1e-2)
    ap.add_argument("--noise-factor", type=float, default=3.0)
    ap.add_argument("--grad-tol", type=float, default=2e-2)
    ap.add_argument("--no-strict", action="store_true", help="report the strict figures without requiring them")
    ap.add_argument("--json", help="write the whole result here")
    args = ap.parse_args()
    if bool(args.candidate_grads) != bool(args.reference_grads):
        print("compare: give both --candidate-grads and --reference-grads, or neither", file=sys.stderr)
        return 2

    try:
        cand = read_metrics(args.candidate)
        refm = read_metrics(args.reference)
        ref2 = read_metrics(args.reference2) if args.reference2 else None
    except (OSError, ParityError) as ex:
        print(f"compare: {ex}", file=sys.stderr)
        return 2

    result = {"candidate": args.candidate, "reference": args.reference, "reference2": args.reference2}
    verdicts = {}

    # ---- per-step table ----------------------------------------------------------------------------
    n = max(len(cand["loss"]), len(refm["loss"]), len(ref2["loss"]) if ref2 else 0)

    def at(m, key, i):
        return m[key][i] if m is not None and i < len(m[key]) else None

    hdr = f"{'step':>4}  {'lr':>10}  {'candidate':>12}  {'reference':>12}  {'rel diff':>9}"
    if ref2:
        hdr += f"  {'reference2':>12}  {'ref2 vs ref':>11}"
    hdr += f"  {'gnorm cand':>10}  {'gnorm ref':>10}"
    print(hdr)
    table = []
    for i in range(n):
        c, g = at(cand, "loss", i), at(refm, "loss", i)
        d = relative_diff(c, g) if c is not None and g is not None else None
        row = {"step": i, "lr": at(refm, "lr", i), "candidate": c, "reference": g, "rel_diff": d,
               "grad_norm_candidate": at(cand, "grad_norm", i), "grad_norm_reference": at(refm, "grad_norm", i)}
        line = (f"{i:>4}  {fmt(row['lr'], '.4e'):>10}  {fmt(c):>12}  {fmt(g):>12}  {fmt(d, '.2e'):>9}")
        if ref2:
            g2 = at(ref2, "loss", i)
            d2 = relative_diff(g2, g) if g2 is not None and g is not None else None
            row.update(reference2=g2, ref2_rel_diff=d2)
            line += f"  {fmt(g2):>12}  {fmt(d2, '.2e'):>11}"
        line += f"  {fmt(row['grad_norm_candidate'], '.4f'):>10}  {fmt(row['grad_norm_reference'], '.4f'):>10}"
        print(line)
        table.append(row)
    result["steps"] = table
    lr_c = [x for x in cand["lr"] if x is not None]
    lr_r = [x for x in refm["lr"] if x is not None]
    if lr_c and lr_r and len(lr_c) == len(lr_r):
        lr_dev = max(relative_diff(a, b) if b else abs(a) for a, b in zip(lr_c, lr_r))
        result["lr_max_relative_difference"] = lr_dev
        if lr_dev > 1e-6:
            print(f"WARNING: the learning rates differ (max relative difference {lr_dev:.3e}): not the same schedule")
            verdicts["same_lr_schedule"] = False

    # ---- convergence check -----------------------------------------------------------------------------
    conv = convergence_check(cand["loss"], refm["loss"], cand["grad_norm"], refm["grad_norm"])
    result["convergence"] = conv
    print("\nconvergence check (recipes-and-measurement.md §4, candidate vs reference): "
          + ("PASS" if conv["passed"] else "FAIL"))
    print(f"  points {conv['points']}, skipped {conv['skipped']}, compared {conv['compared']}")
    print(f"  correlation {fmt(conv['correlation'], '.6f')} (>= 0.95): {conv['checks']['correlation']}")
    print(f"  point-wise failures {len(conv['pointwise_failures'])}/{conv['compared']} (<= 10%): "
          f"{conv['checks']['pointwise']}")
    for f_ in conv["pointwise_failures"]:
        print(f"    step {f_['step']}: candidate {f_['candidate']:.6f}, reference {f_['reference']:.6f}, "
              f"rel {f_['relative_diff']:.3e} > {f_['tolerance']}")
    print(f"  final loss rel diff {fmt(conv['final_loss_difference'], '.3e')} (<= 0.05): {conv['checks']['final_loss']}")
    print(f"  outliers (3 sigma) {conv['outlier_count']} (<= 10%): {conv['checks']['outliers']}")
    print(f"  finite: {conv['checks']['finite']}" + (f" {conv['non_finite']}" if conv["non_finite"] else "")
          + f"; same length: {conv['checks']['same_length']}")
    verdicts["convergence"] = conv["passed"]

    # ---- strict figures --------------------------------------------------------------------------------
    strict, strict_step = conv["max_relative_difference"], conv["max_relative_difference_step"]
    result["strict_max_relative_difference"] = strict
    result["strict_max_relative_difference_step"] = strict_step
    print(f"\nstrict max relative loss difference, all {conv['points']} steps: {strict:.3e} (step {strict_step}); "
          f"required <= {args.strict_tol:g}")
    verdicts["strict"] = strict <= args.strict_tol
    if ref2:
        noise, noise_step = max_relative_difference(ref2["loss"], refm["loss"])
        result["reference_run_to_run_max_relative_difference"] = noise
        result["reference_run_to_run_step"] = noise_step
        ratio = strict / noise if noise > 0 else (math.inf if strict > 0 else 0.0)
        result["strict_over_noise"] = ratio
        print(f"reference run-to-run max relative difference: {noise:.3e} (step {noise_step}); candidate/noise = "
              f"{ratio:.2f}; required <= {args.noise_factor:g}")
        verdicts["within_noise"] = strict <= args.noise_factor * noise
        if len(ref2["loss"]) != len(refm["loss"]):
            print("WARNING: the two reference runs have different lengths")
            verdicts["reference_runs_complete"] = False
    if args.no_strict:
        for k in ("strict", "within_noise"):
            if k in verdicts:
                result.setdefault("not_required", []).append(k)
                verdicts[k] = True

    # ---- gradients -------------------------------------------------------------------------------------
    errs = problems = source = None
    if args.candidate_grads:
        try:
            errs, problems = grad_errors(args.candidate_grads, args.reference_grads)
        except (OSError, ParityError, ValueError) as ex:
            print(f"compare: gradient files: {ex}", file=sys.stderr)
            return 2
        source = {"candidate": args.candidate_grads, "reference": args.reference_grads}
    elif args.grad_errors:
        try:
            with open(args.grad_errors) as f:
                rep = json.load(f)
            errs = {k: (float("nan") if v is None else float(v)) for k, v in rep["per_tensor"].items()}
            problems = list(rep.get("problems") or [])
        except (OSError, KeyError, ValueError, TypeError) as ex:
            print(f"compare: {args.grad_errors}: {ex}", file=sys.stderr)
            return 2
        source = {"errors_file": args.grad_errors, "candidate": rep.get("candidate"),
                  "reference": rep.get("reference")}
    if errs is not None:
        worst = sorted(errs.items(), key=lambda kv: (-kv[1] if math.isfinite(kv[1]) else -math.inf))
        bad = [k for k, v in errs.items() if not (v <= args.grad_tol)]
        result["gradients"] = dict(source, tensors=len(errs), max=worst[0][1] if worst else None, worst=worst[:10],
                                   over_tolerance=bad, problems=problems, per_tensor=errs)
        print(f"\ngradients ({', '.join(f'{k} {v}' for k, v in source.items())}):")
        print(f"  {len(errs)} tensors, relative L2 error ||c - r|| / ||r|| max "
              f"{fmt(worst[0][1] if worst else None, '.3e')} ({worst[0][0] if worst else '-'}); "
              f"{len(bad)} over {args.grad_tol:g}")
        for k, v in worst[:10]:
            print(f"  {v:.3e}  {k}")
        for p in problems:
            print(f"  PROBLEM: {p}")
        verdicts["gradients"] = not bad and not problems and len(errs) > 0
    if args.reference_grad_noise:
        try:
            with open(args.reference_grad_noise) as f:
                noise = json.load(f)
            result["reference_gradient_noise"] = {"max": noise.get("max"), "worst": noise.get("worst"),
                                                  "routing_choices_changed": noise.get("routing_choices_changed_vs_run1")}
            print(f"reference run-to-run gradient relative L2 error: max {fmt(noise.get('max'), '.3e')}; worst "
                  + ", ".join(f"{k} {fmt(v, '.2e')}" for k, v in (noise.get("worst") or [])[:3]))
        except (OSError, json.JSONDecodeError) as ex:
            print(f"WARNING: cannot read {args.reference_grad_noise}: {ex}")

    passed = all(verdicts.values())
    result["verdicts"] = verdicts
    result["passed"] = passed
    print("\n" + ", ".join(f"{k}: {'pass' if v else 'FAIL'}" for k, v in verdicts.items()))
    print("PARITY " + ("PASS" if passed else "FAIL"))
    if args.json:
        def clean(o):
            if isinstance(o, float) and not math.isfinite(o):
                return None
            if isinstance(o, dict):
                return {k: clean(v) for k, v in o.items()}
            if isinstance(o, (list, tuple)):
                return [clean(v) for v in o]
            return o
        with open(args.json, "w") as f:
            json.dump(clean(result), f, indent=1)
            f.write("\n")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
