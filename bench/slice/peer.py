#!/usr/bin/env python3
"""The transformers peer of the slice benchmark (docs/performance.md, "The slice").

Hugging Face transformers' InklingForCausalLM loaded from the release-format checkpoint that
tools/parity/make_init.py wrote (through tools/parity/inkling_ref.py: from_pretrained with transformers' own
checkpoint conversion, eager attention, eager experts), then cast to bf16: plain bf16 training (weights,
gradients and torch.optim.AdamW's state all bf16; no autocast, no fp32 master), as performance.md's peer.
The same rows as quill (quill's rows_for_step: step k takes rows k*R .. k*R+R-1 mod n), one 8,192-token row
per micro-batch, the loss of quill (sum of the masked per-token NLL over the global batch / supervised
targets; fp32 softmax over the unpadded vocabulary on the supervised positions), clip to 1.0, AdamW
(lr 1e-5 constant, betas 0.9/0.999, eps 1e-8, weight decay 0.01 on matrices), the miles-frozen tensors frozen.

Timing: CUDA events around each whole optimizer step (zero_grad .. optimizer.step), the host waiting for the
end event; peak memory torch.cuda.max_memory_allocated (tensors; reset before each arm), also reserved.

Arms: global batch 1, then global batch 8 (8 micro-batches, one optimizer step). An arm that runs out of
memory is reported as such and the next one still runs. With --deadline (epoch seconds) an arm stops before
a step that would end past it, and global batch 8 runs as many steps (<= --steps8) as fit by the measured
row time; what ran is reported.

Usage: python3 bench/slice/peer.py --init DIR --rows DIR --out peer.json [--steps 12 --steps8 12 --warmup 3]
                                   [--deadline EPOCH] [--arms 1,8]
"""

import argparse
import gc
import json
import math
import os
import statistics
import sys
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "tools", "parity"))

import inkling_ref as ref  # noqa: E402
from inkling_ref import mg, np, torch  # noqa: E402
from parity_io import RowsDir  # noqa: E402

N_ACTIVE = 1_805_484_032  # quill model info --config configs/slice.json: active_params
PEAK = 989e12


def summarize(steps, warmup, row_tokens, gb):
    times = [s["step_s"] for s in steps if s["step"] >= warmup] or [s["step_s"] for s in steps]
    if not times:
        return {}
    med = statistics.median(times)
    mean = statistics.fmean(times)
    tps = gb * row_tokens / med
    return {
        "measured_steps": len(times), "median_step_s": med, "min_step_s": min(times), "max_step_s": max(times),
        "mean_step_s": mean, "spread_pct": 100 * (max(times) - min(times)) / med,
        "cv_pct": 100 * statistics.stdev(times) / mean if len(times) > 1 else 0.0,
        "tokens_per_step": gb * row_tokens, "tokens_per_s": tps, "mfu": 6 * N_ACTIVE * tps / PEAK,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--init", required=True)
    ap.add_argument("--rows", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=12, help="steps of the global-batch-1 arm")
    ap.add_argument("--steps8", type=int, default=12, help="at most this many steps of the global-batch-8 arm")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--arms", default="1,8")
    ap.add_argument("--deadline", type=float, default=0.0, help="epoch seconds; 0: none")
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--experts-implementation", default=None,
                    help="after loading (eager, as tools/parity/inkling_ref.py sets it), switch transformers' experts "
                         "implementation to this one (e.g. grouped_mm), where the model supports it")
    args = ap.parse_args()
    ref.set_tool("PEER")
    t_start = time.time()
    dev = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = False
    result = {"peer": "transformers InklingForCausalLM, eager attention and experts, plain bf16 (weights, grads, "
                      "AdamW state), torch.optim.AdamW (default foreach), no autocast",
              "gpu": torch.cuda.get_device_name(dev), "torch": torch.__version__,
              "transformers": ref.transformers.__version__, "arms": []}

    def save():
        result["seconds"] = round(time.time() - t_start, 1)
        tmp = args.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")
        os.replace(tmp, args.out)

    rows = RowsDir(args.rows)
    T = rows.row_tokens
    t0 = time.time()
    mm, _ = ref.load_mm(args.init)
    tc = ref.tc_from_config(mm.config.text_config)
    spec = mg.ckpt_spec(tc)
    causal, resolved = ref.build_causal(mm, spec, dev)
    del mm
    gc.collect()
    if args.experts_implementation:
        ref.check(hasattr(causal, "set_experts_implementation"), "this transformers cannot switch experts")
        causal.set_experts_implementation(args.experts_implementation)
    result["attn_implementation"] = getattr(causal.config, "_attn_implementation", None)
    result["experts_implementation"] = getattr(causal.config, "_experts_implementation", None)
    causal.to(dtype=torch.bfloat16)
    causal.train()
    torch.cuda.empty_cache()
    U = tc["unpadded_vocab_size"]
    ref.check(rows.max_token_id < U, f"rows hold token id {rows.max_token_id} >= {U}")
    params = dict(causal.named_parameters())
    frozen = {n for e in spec if e["role"] == "frozen" for n in resolved[e["name"]]}
    for n, p in params.items():
        p.requires_grad_(n not in frozen)
    trainable = [p for p in params.values() if p.requires_grad]
    decay = [p for p in trainable if p.ndim >= 2]
    no_decay = [p for p in trainable if p.ndim < 2]
    result["load_s"] = round(time.time() - t0, 1)
    result["trainable_values"] = sum(p.numel() for p in trainable)
    result["param_dtypes"] = sorted({str(p.dtype) for p in params.values()})
    print(f"peer: loaded {args.init} in {result['load_s']} s; {result['trainable_values']:,} trainable values, "
          f"dtypes {result['param_dtypes']}; attention {result['attn_implementation']}, experts "
          f"{result['experts_implementation']}; {rows.rows} rows of {T} tokens", flush=True)
    save()

    row_s = None  # measured seconds per row (global batch 1 median)
    for gb in [int(x) for x in args.arms.split(",") if x]:
        steps = args.steps if gb == 1 else args.steps8
        if gb != 1 and row_s and args.deadline:
            fit = int((args.deadline - time.time() - 10) / (gb * row_s * 1.05))
            steps = max(0, min(steps, fit))
        arm = {"global_batch": gb, "row_tokens": T, "planned_steps": steps, "warmup": args.warmup, "steps": [],
               "oom": None, "stopped": None}
        result["arms"].append(arm)
        if steps == 0:
            arm["stopped"] = "no time left before the deadline"
            save()
            continue
        opt = None
        try:
            gc.collect()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(dev)
            opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
                                    lr=args.lr, betas=(0.9, 0.999), eps=1e-8)
            last = None
            for step in range(steps):
                if args.deadline and last is not None and time.time() + 1.05 * last > args.deadline:
                    arm["stopped"] = f"deadline: stopped before step {step}"
                    break
                batch = rows.rows_for_step(step, gb)
                n_sup = int(sum(int(rows.supervised[r]) for r in batch))
                torch.cuda.reset_peak_memory_stats(dev)
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                torch.cuda.synchronize(dev)
                h0 = time.perf_counter()
                e0.record()
                opt.zero_grad(set_to_none=True)
                loss_acc = torch.zeros((), dtype=torch.float64, device=dev)
                for r in batch:
                    ids = torch.from_numpy(np.asarray(rows.tokens[r], dtype=np.int64)).to(dev)[None]
                    msk = torch.from_numpy(np.asarray(rows.mask[r], dtype=np.int64)).to(dev)[None]
                    logits = causal(input_ids=ids, use_cache=False).logits
                    s = ref.masked_nll_sum(logits, ids, msk)
                    (s / n_sup).backward()
                    loss_acc += s.detach().double()
                    del logits, s
                gnorm = torch.nn.utils.clip_grad_norm_(trainable, 1.0)
                opt.step()
                e1.record()
                e1.synchronize()
                host_s = time.perf_counter() - h0
                step_s = e0.elapsed_time(e1) / 1e3
                last = host_s
                loss = float(loss_acc) / n_sup
                arm["steps"].append({"step": step, "step_s": step_s, "host_s": host_s, "loss": loss,
                                     "grad_norm": float(gnorm), "peak_bytes": torch.cuda.max_memory_allocated(dev),
                                     "reserved_bytes": torch.cuda.max_memory_reserved(dev)})
                print(f"peer gb{gb} step {step:2d}: {1e3 * step_s:8.1f} ms  {gb * T / step_s:8.0f} tokens/s  loss "
                      f"{loss:.4f}  peak {torch.cuda.max_memory_allocated(dev) / 2**30:.1f} GiB", flush=True)
                save()
        except torch.cuda.OutOfMemoryError as ex:
            arm["oom"] = {"at_step": len(arm["steps"]), "message": str(ex).split("\n")[0][:400]}
            print(f"peer gb{gb}: out of memory at step {len(arm['steps'])}: {arm['oom']['message']}", flush=True)
        finally:
            del opt
            for p in trainable:
                p.grad = None
            gc.collect()
            torch.cuda.empty_cache()
        arm["summary"] = summarize(arm["steps"], args.warmup, T, gb)
        if arm["steps"]:
            arm["peak_bytes"] = max(s["peak_bytes"] for s in arm["steps"])
            arm["peak_reserved_bytes"] = max(s["reserved_bytes"] for s in arm["steps"])
        if gb == 1 and arm["summary"]:
            row_s = arm["summary"]["median_step_s"]
        save()
    print(f"peer done in {time.time() - t_start:.1f} s", flush=True)


if __name__ == "__main__":
    main()
