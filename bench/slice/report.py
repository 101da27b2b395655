#!/usr/bin/env python3
"""The slice benchmark's report: quill against the transformers peer, and quill's per-kernel table.

Reads what bench/slice/run.sh left in --work (ceilings.json, model_info.json, quill-gb{1,8}/metrics.jsonl and
op_profile_step*.json, peer.json) and writes --out/slice-bench.json and --out/slice-bench.txt; prints the text,
the comparison table last (the device tool returns the end of the output).

Figures (bench/slice/README.md):
  tokens/s     tokens of the global batch / median step time of the measured steps
  MFU          6 * N * tokens/s / 989e12, N = active parameters (quill model info; 1,805,484,032 for the slice)
  peak GiB     quill: most bytes its device allocator held during a step (max over steps); the peer:
               torch.cuda.max_memory_allocated (max over steps). Both count tensors, not the CUDA context.
  median, spread  of the step time over the measured steps: steps >= warm-up, the profiled step left out;
               spread = (max - min) / median
  ratio        quill / peer (tokens/s and MFU: > 1 is quill faster; memory: < 1 is quill smaller)
Works on partial results (an arm stopped by its time limit is reported with the steps it finished).
"""

import argparse
import glob
import json
import os
import statistics
import time

PEAK = 989e12
GIB = 2 ** 30


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def stats(times, tokens, n_active):
    if not times:
        return None
    med = statistics.median(times)
    mean = statistics.fmean(times)
    tps = tokens / med if med > 0 else 0.0
    return {"measured_steps": len(times), "median_step_s": med, "min_step_s": min(times), "max_step_s": max(times),
            "spread_pct": 100 * (max(times) - min(times)) / med if med > 0 else 0.0,
            "cv_pct": 100 * statistics.stdev(times) / mean if len(times) > 1 and mean > 0 else 0.0,
            "tokens_per_step": tokens, "tokens_per_s": tps, "mfu": 6 * n_active * tps / PEAK}


def quill_arm(work, gb, warmup, n_active):
    d = os.path.join(work, f"quill-gb{gb}")
    log = os.path.join(work, f"quill-gb{gb}.log")
    arm = {"global_batch": gb, "ran": os.path.isdir(d) or os.path.exists(log)}
    lines = []
    try:
        with open(os.path.join(d, "metrics.jsonl")) as f:
            lines = [json.loads(l) for l in f if l.strip()]
    except OSError:
        pass
    prof = sorted(glob.glob(os.path.join(d, "op_profile_step*.json")))
    profile_step = None
    if prof:
        p = load_json(prof[0])
        profile_step = p.get("step") if p else None
    arm["steps_run"] = len(lines)
    arm["profile_step"] = profile_step
    arm["summary_json"] = load_json(os.path.join(d, "summary.json"))
    arm["complete"] = arm["summary_json"] is not None
    times = ([l["step_time_s"] for l in lines if l["step"] >= warmup and l["step"] != profile_step]
             or [l["step_time_s"] for l in lines if l["step"] >= warmup] or [l["step_time_s"] for l in lines])
    tokens = lines[-1]["tokens"] if lines else 0
    arm["summary"] = stats(times, tokens, n_active)
    peaks = [l["peak_gpu_bytes"] for l in lines if "peak_gpu_bytes" in l]
    arm["peak_bytes"] = max(peaks) if peaks else None
    arm["device_used_bytes_end"] = lines[-1].get("device_used_bytes") if lines else None
    arm["step_times_s"] = [l["step_time_s"] for l in lines]
    arm["losses"] = [l["loss"] for l in lines]
    if arm["ran"] and not arm["complete"]:
        try:
            with open(log, errors="replace") as f:
                arm["log_tail"] = f.read()[-1500:]
        except OSError:
            arm["log_tail"] = None
    return arm


def peer_arm(peer, gb, warmup, n_active):
    if not peer:
        return {"global_batch": gb, "ran": False}
    for a in peer.get("arms", []):
        if a["global_batch"] == gb:
            times = [s["step_s"] for s in a["steps"] if s["step"] >= warmup] or [s["step_s"] for s in a["steps"]]
            out = {"global_batch": gb, "ran": True, "steps_run": len(a["steps"]), "oom": a.get("oom"),
                   "stopped": a.get("stopped"), "planned_steps": a.get("planned_steps"),
                   "summary": stats(times, gb * a["row_tokens"], n_active),
                   "peak_bytes": max((s["peak_bytes"] for s in a["steps"]), default=None),
                   "peak_reserved_bytes": max((s["reserved_bytes"] for s in a["steps"]), default=None),
                   "step_times_s": [s["step_s"] for s in a["steps"]], "losses": [s["loss"] for s in a["steps"]]}
            return out
    return {"global_batch": gb, "ran": False}


CATEGORIES = [  # performance.md's breakdown of the strong PyTorch peer
    ("attention fwd+bwd", lambda op: op.startswith("attention_")),
    ("expert GEMMs (grouped)", lambda op: op.startswith("grouped_linear")),
    ("other GEMMs (linear_*)", lambda op: op.startswith("linear_")),
    ("AdamW", lambda op: op == "adamw_update"),
    ("loss (cross entropy)", lambda op: op.startswith("cross_entropy")),
    ("MoE plumbing + router", lambda op: op.startswith("moe_") or op.startswith("router_")),
    ("elementwise, norms, rest", lambda op: True),
]


def profile_view(prof, ceil):
    """Rows with achieved/ceiling against the measured ceilings, the per-op roll-up and the categories."""
    if not prof:
        return None
    mm, cp = ceil["matmul_tflops"], ceil["copy_gbps"]
    step_ms = prof["step_ms"]

    def rate(kind, flops, nbytes, ms):
        if ms <= 0:
            return 0.0, "", 0.0
        if kind == "memory":
            v = nbytes / (ms * 1e6)
            return v, "GB/s", v / cp
        v = flops / (ms * 1e9)
        return v, "TFLOP/s", v / mm

    rows = []
    for r in prof["rows"]:
        v, unit, frac = rate(r["kind"], r["flops"], r["bytes"], r["total_ms"])
        rows.append(dict(op=r["op"], signature=r["signature"], kind=r["kind"], calls=r["calls"], total_ms=r["total_ms"],
                         mean_us=r["mean_us"], pct_step=100 * r["total_ms"] / step_ms if step_ms else 0,
                         achieved=v, unit=unit, of_ceiling=frac))
    by_op = []
    for r in prof["by_op"]:
        v, unit, frac = rate(r["kind"], r["flops"], r["bytes"], r["total_ms"])
        by_op.append(dict(op=r["op"], kind=r["kind"], calls=r["calls"], total_ms=r["total_ms"],
                          pct_step=100 * r["total_ms"] / step_ms if step_ms else 0, achieved=v, unit=unit,
                          of_ceiling=frac))
    cats = {name: 0.0 for name, _ in CATEGORIES}
    for r in prof["by_op"]:
        for name, match in CATEGORIES:
            if match(r["op"]):
                cats[name] += r["total_ms"]
                break
    cats["outside ops (gaps, host, syncs)"] = step_ms - prof["ops_ms"]
    return {"step": prof["step"], "step_ms": step_ms, "host_ms": prof["host_ms"], "ops_ms": prof["ops_ms"],
            "calls": prof["calls"], "nested_calls": prof["nested_calls"], "ceilings": {"matmul_tflops": mm, "copy_gbps": cp},
            "rows": rows, "by_op": by_op,
            "categories": [{"category": k, "ms": v, "pct_step": 100 * v / step_ms if step_ms else 0} for k, v in cats.items()]}


def fmt_profile(name, pv, top):
    out = [f"== quill per-kernel table, {name}: step {pv['step']}, {pv['step_ms']:.1f} ms on the stream "
           f"({pv['host_ms']:.1f} ms host), ops {pv['ops_ms']:.1f} ms in {pv['calls']} calls; ceilings: matmul "
           f"{pv['ceilings']['matmul_tflops']:.0f} TFLOP/s, copy {pv['ceilings']['copy_gbps']:.0f} GB/s =="]
    out.append(f"{'category':<34} {'ms':>9} {'% step':>7}")
    for c in pv["categories"]:
        out.append(f"{c['category']:<34} {c['ms']:>9.2f} {c['pct_step']:>7.1f}")
    out.append("")
    out.append(f"{'op':<31} {'kind':<9} {'calls':>6} {'total ms':>9} {'% step':>7} {'achieved':>9} {'unit':<7} {'% ceil':>6}")
    for r in pv["by_op"]:
        out.append(f"{r['op'][:31]:<31} {r['kind']:<9} {r['calls']:>6} {r['total_ms']:>9.2f} {r['pct_step']:>7.2f} "
                   f"{r['achieved']:>9.1f} {r['unit']:<7} {100 * r['of_ceiling']:>6.1f}")
    if top:
        out.append("")
        out.append(f"top {top} (op, shapes):")
        out.append(f"{'op':<28} {'shapes':<52} {'calls':>5} {'total ms':>9} {'% step':>6} {'achieved':>9} {'unit':<7} "
                   f"{'% ceil':>6}")
        for r in pv["rows"][:top]:
            sig = r["signature"] if len(r["signature"]) <= 52 else r["signature"][:49] + "..."
            out.append(f"{r['op'][:28]:<28} {sig:<52} {r['calls']:>5} {r['total_ms']:>9.2f} {r['pct_step']:>6.2f} "
                       f"{r['achieved']:>9.1f} {r['unit']:<7} {100 * r['of_ceiling']:>6.1f}")
    return "\n".join(out)


def cell(v, f, suffix=""):
    width = int("".join(ch for ch in f.split(".")[0] if ch.isdigit()) or 0)
    return "-".rjust(width + len(suffix)) if v is None else format(v, f) + suffix


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--commit", default="unknown")
    ap.add_argument("--warmup", type=int, default=3)
    args = ap.parse_args()
    w = args.work
    info = load_json(os.path.join(w, "model_info.json")) or {}
    n_active = info.get("active_params", 1_805_484_032)
    ceil = load_json(os.path.join(w, "ceilings.json"))
    ceil_used = ceil or {"matmul_tflops": 794.0, "copy_gbps": 4240.0, "note": "not measured: performance.md's figures"}
    peer = load_json(os.path.join(w, "peer.json"))
    env = ""
    try:
        with open(os.path.join(w, "env.txt")) as f:
            env = f.read()
    except OSError:
        pass

    arms = {}
    for gb in (1, 8):
        arms[f"quill_gb{gb}"] = quill_arm(w, gb, args.warmup, n_active)
        arms[f"peer_gb{gb}"] = peer_arm(peer, gb, args.warmup, n_active)
    ratios = {}
    for gb in (1, 8):
        q, p = arms[f"quill_gb{gb}"], arms[f"peer_gb{gb}"]
        qs, ps = q.get("summary"), p.get("summary")
        r = {}
        if qs and ps:
            r["tokens_per_s"] = qs["tokens_per_s"] / ps["tokens_per_s"]
            r["median_step"] = qs["median_step_s"] / ps["median_step_s"]
        if q.get("peak_bytes") and p.get("peak_bytes"):
            r["peak_memory"] = q["peak_bytes"] / p["peak_bytes"]
        ratios[f"gb{gb}"] = r
    profiles = {}
    for gb in (1, 8):
        files = sorted(glob.glob(os.path.join(w, f"quill-gb{gb}", "op_profile_step*.json")))
        pv = profile_view(load_json(files[0]), ceil_used) if files else None
        if pv:
            profiles[f"gb{gb}"] = pv

    report = {"date": time.strftime("%Y-%m-%d", time.gmtime()), "commit": args.commit, "env": env,
              "active_params": n_active, "peak_flops": PEAK, "ceilings": ceil_used, "arms": arms, "ratios": ratios,
              "profiles": profiles, "peer_meta": {k: v for k, v in (peer or {}).items() if k != "arms"},
              "definitions": __doc__}

    text = []
    text.append(f"slice benchmark, {report['date']}, commit {args.commit}")
    text.append(env.strip())
    if ceil:
        text.append(f"ceilings measured: matmul {ceil['matmul_tflops']} TFLOP/s (bf16 8192^3), copy "
                    f"{ceil['copy_gbps']} GB/s (read+write)")
    else:
        text.append("ceilings NOT measured; using performance.md's 794 TFLOP/s and 4240 GB/s")
    for gb in (1, 8):
        if f"gb{gb}" in profiles:
            text.append("")
            text.append(fmt_profile(f"global batch {gb}", profiles[f"gb{gb}"], 25 if gb == 8 or "gb8" not in profiles else 0))
    for k, a in arms.items():
        if a.get("ran") and k.startswith("quill") and not a.get("complete"):
            text.append(f"\n{k} did not finish (steps run {a.get('steps_run')}); log tail:\n{a.get('log_tail') or ''}")
        if k.startswith("peer") and (a.get("oom") or a.get("stopped")):
            text.append(f"\n{k}: " + (f"OUT OF MEMORY at step {a['oom']['at_step']}: {a['oom']['message']}"
                                      if a.get("oom") else f"stopped: {a['stopped']}"))

    text.append("")
    text.append(f"== slice (4 layers, 32 experts, 8,192-token rows), N = {n_active:,}, MFU = 6N tokens/s / 989e12 ==")
    hdr = f"{'arm':<14} {'tokens/s':>9} {'MFU %':>6} {'peak GiB':>8} {'median ms':>10} {'spread %':>8} {'cv %':>5} {'steps':>9}"
    text.append(hdr)
    for gb in (1, 8):
        for who in ("quill", "peer"):
            a = arms[f"{who}_gb{gb}"]
            s = a.get("summary") or {}
            steps = f"{s.get('measured_steps', 0)}/{a.get('steps_run', 0)}"
            note = ""
            if a.get("oom"):
                note = " OOM"
            elif not a.get("ran"):
                note = " not run"
            elif who == "quill" and not a.get("complete"):
                note = " (cut)" if a.get("steps_run") else " FAILED"
            elif a.get("stopped"):
                note = " (cut)"
            pk = a.get("peak_bytes")
            text.append(f"{who + ' gb' + str(gb):<14} {cell(s.get('tokens_per_s'), '9.0f')} "
                        f"{cell(100 * s['mfu'] if s else None, '6.2f')} {cell(pk / GIB if pk else None, '8.1f')} "
                        f"{cell(1e3 * s['median_step_s'] if s else None, '10.1f')} {cell(s.get('spread_pct'), '8.1f')} "
                        f"{cell(s.get('cv_pct'), '5.1f')} {steps:>9}{note}")
        r = ratios[f"gb{gb}"]
        text.append(f"{'quill/peer':<14} {cell(r.get('tokens_per_s'), '8.2f', 'x')} {cell(r.get('tokens_per_s'), '5.2f', 'x')} "
                    f"{cell(r.get('peak_memory'), '7.2f', 'x')} {cell(r.get('median_step'), '9.2f', 'x')}")
    text.append("steps = measured/run (measured: steps >= warm-up, quill's profiled step left out); peak = tensors "
                "(quill allocator, torch max_memory_allocated)")
    out_text = "\n".join(text) + "\n"
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "slice-bench.txt"), "w") as f:
        f.write(out_text)
    with open(os.path.join(args.out, "slice-bench.json"), "w") as f:
        json.dump(report, f, indent=1)
        f.write("\n")
    print(out_text, end="")


if __name__ == "__main__":
    main()
