#!/usr/bin/env python3
"""Layouts against a one-GPU reference on the same rows (issue 25's report; scripts/gpu/two-gpu.sh):

1. losses: each run's per-step relative loss difference from the reference, its largest, and the noise
   floor (the reference against a run that differs only in the order of float sums);
2. throughput: tokens/s per GPU, MFU and step-time CV from each run's summary.json, the scaling
   efficiency (tokens/s per GPU over the reference's), and the peak device bytes of every rank;
3. collectives: the rows of each run's op profiles (op_profile_step*.json, every rank that wrote one),
   each operation's own time on its communication stream, its bus bandwidth against NCCL's measured at
   the nearest probed size for the same operation and group size (nccl_probe --json), and the part
   hidden under compute;
4. with --predictions: each run against quill plan's memory per stage (RUN.plan.json) and the one-GPU rank
   projection (RUN.projection.json), beside the run directory.

Usage:
  layout_report.py --reference DIR [--noise DIR] [--probe FILE.jsonl] [--max-rel-diff X] [--predictions] RUN_DIR [RUN_DIR ...]
  layout_report.py --sizes RUN_DIR [RUN_DIR ...]   # the per-call payload sizes the profiles show, for nccl_probe
  layout_report.py --comm-params PROBE.jsonl         # quill project's bandwidth and latency flags from a probe
"""
import argparse
import glob
import json
import math
import os


def load_jsonl(path):
    """The file's JSON lines ([] when it is missing); a line that is not JSON stops the report naming it
    (a run killed mid-write leaves a torn last line: the report would otherwise compare a short run)."""
    try:
        with open(path) as f:
            lines = f.readlines()
    except OSError:
        return []
    rows = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except ValueError as e:
            raise SystemExit(f"layout_report: {path}:{n}: not a JSON line ({e}); torn by a killed run?")
    return rows


def load_json(path):
    """The file's JSON (None when it is missing); a file that is not JSON stops the report naming it."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return None
    try:
        return json.loads(text)
    except ValueError as e:
        raise SystemExit(f"layout_report: {path}: not JSON ({e})")


def name_of(run_dir):
    return os.path.basename(run_dir.rstrip("/"))


def max_rel_diff(ref, got):
    diffs = [abs(a["loss"] - b["loss"]) / abs(a["loss"]) for a, b in zip(ref, got)]
    return (max(diffs) if diffs else float("nan")), diffs


def profiles(run_dir):
    """(rank label, profile) for every op profile the run wrote: rank 0's and the others'."""
    out = []
    for path in sorted(glob.glob(os.path.join(run_dir, "op_profile_step*.json"))):
        p = load_json(path)
        if p is None:
            continue
        base = os.path.basename(path)[: -len(".json")]
        rank = base.split(".rank")[1] if ".rank" in base else "0"
        out.append((rank, p))
    return out


def collective_rows(run_dir):
    for rank, p in profiles(run_dir):
        for row in p.get("collectives", []):
            yield rank, row


def nearest_probe(probe, op, group_size, size):
    """NCCL's row for the same op and group size at the size nearest in log scale (send/recv: send_recv)."""
    op = "send_recv" if op in ("send", "recv") else op
    rows = [r for r in probe if r["op"] == op and r["group_size"] == group_size]
    if not rows or size <= 0:
        return None
    return min(rows, key=lambda r: abs(math.log(r["bytes"]) - math.log(size)))


def same_dir(a, b):
    return os.path.realpath(a) == os.path.realpath(b)


def unique(dirs):
    out = []
    for d in dirs:
        if not any(same_dir(d, o) for o in out):
            out.append(d)
    return out


def losses_section(ref, ref_name, runs, noise, ref_name_dir):
    """Prints the section; returns each run's largest relative difference (None: no metrics)."""
    print("== losses: relative difference from", ref_name)
    worsts = {}
    floor = None
    if noise is not None:
        floor, _ = max_rel_diff(ref, load_jsonl(os.path.join(noise, "metrics.jsonl")))
        print(f"noise floor ({name_of(noise)}: the same run, float sums in another order): max {floor:.3e}")
    for run in runs:
        if same_dir(run, ref_name_dir):
            continue  # the reference itself (listed for its collectives)
        got = load_jsonl(os.path.join(run, "metrics.jsonl"))
        if not got:
            print(f"{name_of(run)}: no metrics")
            worsts[run] = None
            continue
        worst, diffs = max_rel_diff(ref, got)
        worsts[run] = worst if len(got) == len(ref) else None
        ratio = f", {worst / floor:.2f}x the noise floor" if floor else ""
        print(f"{name_of(run)}: {min(len(ref), len(got))} steps, max {worst:.3e}{ratio}; per step "
              + " ".join(f"{d:.1e}" for d in diffs))
    return worsts


def throughput_section(ref_dir, runs):
    print("\n== throughput (summary.json: median of the measured steps)")
    ref = load_json(os.path.join(ref_dir, "summary.json")) or {}
    base = ref.get("tokens_per_s_per_gpu")
    print(f"{'run':<12} {'GPUs':>4} {'median s':>9} {'tok/s/GPU':>10} {'MFU %':>6} {'scaling %':>9} {'CV %':>6}  peak GiB per rank")
    for run in unique([ref_dir] + runs):
        s = load_json(os.path.join(run, "summary.json"))
        if not s or s.get("tokens_per_s_per_gpu") is None:
            print(f"{name_of(run):<12} no summary")
            continue
        tps = s["tokens_per_s_per_gpu"]
        scaling = f"{100 * tps / base:9.1f}" if base else f"{'-':>9}"
        peaks = s.get("peak_device_bytes_per_rank") or [s.get("peak_device_bytes", -1)]
        print(f"{name_of(run):<12} {s.get('world_size', 1):>4} {s['median_step_s']:>9.3f} {tps:>10.0f} "
              f"{100 * s['mfu']:>6.1f} {scaling} {s.get('cv_pct', float('nan')):>6.2f}  "
              + " ".join(f"{b / 2**30:.1f}" for b in peaks))


def collectives_section(runs, probe):
    print("\n== collectives on their communication streams (profiled step; comm ms: from the operation's start on "
          "its stream to its end, waiting for peers included)")
    print(f"{'run':<8} {'rank':>4} {'label':<30} {'group(p)':<9} {'op':<14} {'calls':>5} {'MB/call':>9} {'comm ms':>8} "
          f"{'bus GB/s':>8} {'NCCL GB/s':>9} {'% NCCL':>6} {'hidden %':>8}")
    for run in runs:
        any_row = False
        for rank, r in collective_rows(run):
            any_row = True
            per_call = r["payload_bytes"] / max(1, r["calls"])
            ref = nearest_probe(probe, r["op"], r["group_size"], per_call) if probe else None
            nccl = f"{ref['busbw_gbps']:9.1f}" if ref else f"{'-':>9}"
            pct = f"{100 * r['bus_gbps'] / ref['busbw_gbps']:6.0f}" if ref and ref["busbw_gbps"] > 0 else f"{'-':>6}"
            hidden = 100 * r["hidden_ms"] / r["comm_ms"] if r["comm_ms"] > 0 else 0
            print(f"{name_of(run):<8} {rank:>4} {r['label'][:30]:<30} {r['group'] + '(' + str(r['group_size']) + ')':<9} "
                  f"{r['op']:<14} {r['calls']:>5} {per_call / 1e6:>9.3f} {r['comm_ms']:>8.3f} {r['bus_gbps']:>8.1f} "
                  f"{nccl} {pct} {hidden:>8.1f}")
        if not any_row:
            print(f"{name_of(run):<8} no collective rows (no profile, or no NCCL communicator)")
    print("\n== overlap: per run and rank, the collectives' time and the part hidden under compute")
    for run in runs:
        by = {}
        for rank, r in collective_rows(run):
            t = by.setdefault((rank, r["label"]), [0.0, 0.0])
            t[0] += r["comm_ms"]
            t[1] += r["hidden_ms"]
        for (rank, label), (comm, hidden) in sorted(by.items()):
            print(f"{name_of(run):<8} rank {rank:>2} {label:<32} {comm:9.3f} ms, hidden {hidden:9.3f} ms "
                  f"({100 * hidden / comm if comm else 0:.1f}%)")


def predictions_section(run_dirs):
    """Each run against what quill predicted before it: RUN.plan.json (quill plan --json: memory per stage) and
    RUN.projection.json (quill project of one simulated rank per stage: step time, tokens/s per GPU, MFU)."""
    print("\n== predictions: quill plan's allocator peak per stage and the one-GPU rank projection, against the run")
    for run in run_dirs:
        s = load_json(os.path.join(run, "summary.json"))
        plan = load_json(run.rstrip("/") + ".plan.json")
        proj = load_json(run.rstrip("/") + ".projection.json")
        if not s:
            print(f"{name_of(run)}: no summary")
            continue
        peaks = s.get("peak_device_bytes_per_rank") or []
        if plan and peaks:
            stages, world = plan["stages"], len(peaks)
            for st in stages:
                # pp is the outermost axis of the default rank order: stage k holds ranks [k*world/pp, (k+1)*world/pp).
                k = st["stage"]
                ranks = range(k * world // len(stages), (k + 1) * world // len(stages))
                measured = max(peaks[r] for r in ranks)
                planned = st["allocator_peak_bytes"]
                print(f"{name_of(run)}: stage {k} (ranks {ranks.start}-{ranks.stop - 1}): planned allocator peak "
                      f"{planned / 2**30:.2f} GiB, measured {measured / 2**30:.2f} GiB (largest rank), "
                      f"{100 * (measured - planned) / planned:+.1f}%; planned device total {st['device_total_bytes'] / 2**30:.2f} GiB")
        elif not plan:
            print(f"{name_of(run)}: no plan ({run.rstrip('/')}.plan.json)")
        if proj:
            m = proj.get("metrics", {})
            pairs = [("step s", proj.get("step_s"), s.get("median_step_s")),
                     ("tokens/s/GPU", m.get("tokens_per_s_per_gpu"), s.get("tokens_per_s_per_gpu")),
                     ("MFU %", 100 * m["mfu"] if m.get("mfu") is not None else None,
                      100 * s["mfu"] if s.get("mfu") is not None else None)]
            text = "; ".join(f"{k} projected {a:.3f} measured {b:.3f} ({100 * (b - a) / a:+.1f}%)" for k, a, b in pairs
                             if a and b is not None)
            print(f"{name_of(run)}: {text}; projection: compute {proj.get('compute_s', 0):.3f} s, exposed comm "
                  f"{proj.get('exposed_comm_s', 0):.3f} s, optimizer {proj.get('optimizer_phase_s', 0):.3f} s; largest "
                  "parts: " + ", ".join(f"{b['what']} {b['seconds_per_step']:.3f} s" for b in (proj.get("bounded_by") or [])[:3]))
        else:
            print(f"{name_of(run)}: no projection ({run.rstrip('/')}.projection.json)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reference")
    ap.add_argument("--noise")
    ap.add_argument("--probe")
    ap.add_argument("--sizes", action="store_true")
    ap.add_argument("--comm-params", metavar="PROBE.jsonl",
                    help="print quill project's --nvlink-busbw-gbps and --nvlink-latency-us from an nccl_probe file: the "
                         "mean bus bandwidth of its calls of 16 MiB or more, the median time of those under 64 KiB")
    ap.add_argument("--predictions", action="store_true",
                    help="also set each run (and the reference) against RUN.plan.json and RUN.projection.json")
    ap.add_argument("--max-rel-diff", type=float,
                    help="exit 1 unless every run has all the reference's steps within this relative loss difference")
    ap.add_argument("runs", nargs="*")
    a = ap.parse_args()
    if a.comm_params:
        rows = load_jsonl(a.comm_params)
        big = [r["busbw_gbps"] for r in rows if r["bytes"] >= 16 << 20 and r["busbw_gbps"] > 0]
        small = sorted(r["us"] for r in rows if r["bytes"] < 64 << 10)
        flags = []
        if big:
            flags += ["--nvlink-busbw-gbps", f"{sum(big) / len(big):.1f}"]
        if small:
            flags += ["--nvlink-latency-us", f"{small[len(small) // 2]:.2f}"]
        print(" ".join(flags))
        return
    if not a.runs:
        ap.error("no run directories")
    if a.sizes:
        sizes = sorted({int(r["payload_bytes"] / max(1, r["calls"])) for run in a.runs for _, r in collective_rows(run)})
        print(",".join(str(s) for s in sizes if s > 0))
        return
    if not a.reference:
        ap.error("--reference is required (or --sizes)")
    ref = load_jsonl(os.path.join(a.reference, "metrics.jsonl"))
    if not ref:
        raise SystemExit(f"{a.reference}: no metrics.jsonl")
    probe = load_jsonl(a.probe) if a.probe else []
    worsts = losses_section(ref, name_of(a.reference), a.runs, a.noise, a.reference)
    throughput_section(a.reference, a.runs)
    collectives_section(a.runs, probe)
    if a.predictions:
        predictions_section(unique([a.reference] + a.runs))
    if a.max_rel_diff is not None:
        bad = [name_of(r) for r, w in worsts.items() if w is None or not w <= a.max_rel_diff]
        if bad:
            raise SystemExit(f"layout_report: {', '.join(bad)}: missing steps or a loss difference above {a.max_rel_diff:g}")


if __name__ == "__main__":
    main()
