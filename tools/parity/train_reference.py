#!/usr/bin/env python3
"""The reference arm of the GPU parity runs: Hugging Face transformers' InklingForCausalLM trained on quill's
rows with quill's numerics policy.

Usage:
    python3 tools/parity/train_reference.py --init INIT_DIR --rows ROWS_DIR --steps 20 --global-batch 4 \
        --lr 3e-4 --min-lr 3e-5 --warmup-fraction 0.1 --weight-decay 0.1 --beta1 0.9 --beta2 0.95 \
        --clip-grad 1.0 --out OUT_DIR [--dump-grads-step 0] [--repeat-out OUT_DIR2]

What it does (tools/parity/README.md has the details):
  1. Loads INIT_DIR (make_init.py's release-format checkpoint) with InklingForConditionalGeneration.from_pretrained
     in fp32 on the CPU, so transformers' own checkpoint conversion (renames, w13 de-interleave) runs; asserts
     make_golden's loading checks and that every loaded text weight equals the file's tensor under the explicit
     name/layout map. Copies the text model and lm_head into an InklingForCausalLM on the GPU (fp32 master
     weights), eager attention, eager experts.
  2. Precision (--precision bf16, the default): forward under torch.autocast(bfloat16) with fp32 islands for
     the router, the relative-bias table product and the short convolutions (architecture.md's policy, as
     quill); fp32 gradients, fp32 AdamW state. --precision bf16-plain: autocast without the islands; fp32: no
     autocast, TF32 off.
  3. Frozen as miles: rel_logits_proj.proj, mlp.global_scale, mlp.gate.global_scale; mlp.gate.bias is the
     buffer e_score_correction_bias.
  4. Step k uses rows [k*R, (k+1)*R) mod n of ROWS_DIR (quill's rows_for_step), one row per micro-batch, each
     row its own sequence (positions 0..T-1). Loss = sum over the global batch of mask[t+1] * -log
     softmax(logits[t])[token[t+1]] (softmax over the unpadded vocabulary) / supervised targets of the whole
     global batch; each micro-batch backpropagates its share, gradients accumulate in fp32.
  5. Clip by the global L2 norm (torch.nn.utils.clip_grad_norm_), torch.optim.AdamW(foreach=False), weight decay
     on tensors with ndim >= 2 only, learning rate of step k by Megatron's schedule (parity_io.megatron_lr).
  6. Writes OUT_DIR/metrics.jsonl ({"step","loss","grad_norm","lr","tokens","supervised_tokens","step_time_s"},
     grad_norm before clipping) and OUT_DIR/run.json. With --dump-grads-step K: OUT_DIR/grads_step{K}.safetensors
     (the step-K gradients before clipping of every trainable tensor, fp32, checkpoint names and layout; not with
     --no-grads-file) and OUT_DIR/routing_step{K}.safetensors (the fp32 top-k choice of every token at step K);
     with --compare-grads FILE also OUT_DIR/grad_errors_step{K}.json: per-tensor ||FILE - grad|| / ||grad||,
     computed in process (no second multi-GB file needed for the slice).
  7. With --repeat-out DIR2 it trains again from the same initial weights (the reference's run-to-run noise:
     its scatter-adds are not deterministic) and writes DIR2/metrics.jsonl, DIR2/run.json and, with
     --dump-grads-step K, DIR2/grad_noise_step{K}.json (per-tensor relative L2 difference of the step-K gradients
     against run 1's, and how many tokens' expert choice changed).
"""

import argparse
import contextlib
import json
import math
import os
import shlex
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import inkling_ref as ref  # noqa: E402
from inkling_ref import check, mg, np, torch  # noqa: E402
from parity_io import RowsDir, megatron_lr, self_test_lr  # noqa: E402


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--init", required=True, help="checkpoint directory (config.json + model.safetensors)")
    ap.add_argument("--rows", required=True, help="quill rows directory (rows.bin + manifest.json)")
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--global-batch", type=int, required=True, help="rows per optimizer step (one per micro-batch)")
    # defaults: quill train's (Megatron's where its flags are silent)
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--min-lr", type=float, default=0.0)
    ap.add_argument("--warmup-fraction", type=float, default=0.0)
    ap.add_argument("--lr-decay-style", default="cosine", choices=["cosine", "linear", "constant"])
    ap.add_argument("--lr-decay-steps", type=int, default=0, help="0: --steps")
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--beta1", type=float, default=0.9)
    ap.add_argument("--beta2", type=float, default=0.999)
    ap.add_argument("--adam-eps", type=float, default=1e-8)
    ap.add_argument("--clip-grad", type=float, default=1.0, help="0: no clipping")
    ap.add_argument("--out", required=True)
    ap.add_argument("--dump-grads-step", type=int, default=-1)
    ap.add_argument("--no-grads-file", action="store_true",
                    help="with --dump-grads-step: do not write grads_step{K}.safetensors (in-process comparisons only)")
    ap.add_argument("--compare-grads", default=None,
                    help="a gradient file of step K (quill's); writes OUT/grad_errors_step{K}.json, this run as the "
                         "reference")
    ap.add_argument("--repeat-out", default=None, help="train a second time into this directory (noise)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--precision", default="bf16", choices=["bf16", "bf16-plain", "fp32"])
    args = ap.parse_args()
    check(args.steps > 0 and args.global_batch > 0, "--steps and --global-batch must be positive")
    check(args.dump_grads_step < args.steps, "--dump-grads-step must be a step of the run")
    check(args.dump_grads_step >= 0 or not (args.compare_grads or args.no_grads_file),
          "--compare-grads and --no-grads-file need --dump-grads-step")
    check(args.compare_grads is None or os.path.isfile(args.compare_grads), f"{args.compare_grads}: no such file")
    return args


def write_json(path, obj):
    def clean(o):
        if isinstance(o, float) and not math.isfinite(o):
            return None
        if isinstance(o, dict):
            return {k: clean(v) for k, v in o.items()}
        if isinstance(o, (list, tuple)):
            return [clean(v) for v in o]
        return o
    with open(path, "w") as f:
        json.dump(clean(obj), f, indent=1)
        f.write("\n")


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def gib(b):
    return round(b / 2**30, 2)


def main():
    args = parse_args()
    ref.set_tool("TRAIN_REFERENCE")
    self_test_lr()
    command = "python3 " + " ".join(shlex.quote(a) for a in sys.argv)
    t_start = time.time()
    device = torch.device(args.device)
    if device.type == "cuda":
        check(torch.cuda.is_available(), "--device cuda: no GPU visible")
        torch.cuda.reset_peak_memory_stats(device)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    try:  # fp32 accumulation in bf16 GEMMs (no reduced-precision split-K), as quill's cuBLASLt calls
        torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    except (AttributeError, AssertionError):  # older torch without the switch
        pass
    torch.set_float32_matmul_precision("highest")
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"torch {torch.__version__}, transformers {ref.transformers.__version__}, python "
          f"{sys.version.split()[0]}, device {gpu}, precision {args.precision}")

    # ---- rows --------------------------------------------------------------------------------
    rows = RowsDir(args.rows)
    print(f"rows: {rows.rows} rows of {rows.row_tokens} tokens, max id {rows.max_token_id}, "
          f"supervised targets {int(rows.supervised.sum())}")

    # ---- load through transformers -------------------------------------------------------------
    t0 = time.time()
    mm, n_tower_missing = ref.load_mm(args.init)
    text_model = mm.model.language_model
    text_cfg = mm.config.text_config
    tc = ref.tc_from_config(text_cfg)
    U = tc["unpadded_vocab_size"]
    check(rows.max_token_id < U, f"rows hold token id {rows.max_token_id}, outside the unpadded vocabulary {U}")
    check(float(getattr(text_cfg, "attention_dropout", 0.0) or 0.0) == 0.0, "attention_dropout must be 0")
    spec = mg.ckpt_spec(tc)
    ckpt_path = os.path.join(args.init, "model.safetensors")
    file_dtypes = ref.check_file_matches_spec(ckpt_path, spec)
    mm_resolved, embed_norm_name = mg.resolve_internal(spec, set(text_model.state_dict().keys()),
                                                       "model.language_model.")
    mg.check_coverage(spec, mm_resolved, mm, text_model, "model.language_model.", "InklingForConditionalGeneration")
    mg.check_weights_equal(spec, mm_resolved, mm, ref.FileWeights(ckpt_path),
                           "InklingForConditionalGeneration after from_pretrained")
    check(mm.lm_head.weight.data_ptr() != text_model.embed_tokens.weight.data_ptr(), "lm_head tied to embed")
    print(f"loaded {args.init} through InklingForConditionalGeneration.from_pretrained in {time.time() - t0:.1f} s: "
          f"no unexpected key, no missing text key ({n_tower_missing} tower keys not in the checkpoint); every "
          f"text weight equals the file's tensor under the explicit map")

    t0 = time.time()
    causal, cz_resolved = ref.build_causal(mm, spec, device)
    ref.check_same_weights(spec, mm_resolved, mm, cz_resolved, causal, "InklingForCausalLM after copy")
    print(f"InklingForCausalLM on {device} holds the same weights ({time.time() - t0:.1f} s)")

    by_name = {e["name"]: e for e in spec}
    frozen_ckpt = [e["name"] for e in spec if e["role"] == "frozen"]
    train_ckpt = [e["name"] for e in spec if e["role"] == "train"]
    params = dict(causal.named_parameters())
    frozen_internal = {n for c in frozen_ckpt for n in cz_resolved[c]}
    for n, p in params.items():
        p.requires_grad_(n not in frozen_internal)
    trainable = [(n, p) for n, p in params.items() if p.requires_grad]
    check({n for n, _ in trainable} == {n for c in train_ckpt for n in cz_resolved[c]},
          "trainable parameter set != mapped trainable checkpoint tensors")
    for c in train_ckpt:
        nd = len(by_name[c]["shape"])
        check(all(params[n].ndim == nd for n in cz_resolved[c]), f"ndim differs between layouts for {c}")
    decay = [p for _, p in trainable if p.ndim >= 2]
    no_decay = [p for _, p in trainable if p.ndim < 2]
    n_train = sum(p.numel() for _, p in trainable)
    print(f"trainable: {len(train_ckpt)} checkpoint tensors, {n_train:,} values; frozen: {len(frozen_ckpt)}")

    islands = None
    if args.precision == "bf16":
        islands = ref.Fp32Islands(causal, spec, cz_resolved, device.type)
        print(f"fp32 islands under autocast: {islands.counts()}")

    def autocast():
        if args.precision == "fp32":
            return contextlib.nullcontext()
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)

    monitor = ref.RouterMargins(causal, tc, spec, cz_resolved)
    causal.train()

    runs = [args.out] + ([args.repeat_out] if args.repeat_out else [])
    first_topk = None
    saved_grads = None
    info_islands_missed = None
    exit_code = 0
    for run_index, out_dir in enumerate(runs):
        os.makedirs(out_dir, exist_ok=True)
        for fn in os.listdir(out_dir):
            if fn == "metrics.jsonl" or fn.startswith(("grads_step", "routing_step", "grad_noise_step",
                                                       "grad_errors_step")):
                os.remove(os.path.join(out_dir, fn))
        if run_index > 0:
            ref.copy_weights(mm, causal)
        monitor.stats, monitor.topk = {}, {}
        opt = torch.optim.AdamW(
            [{"params": decay, "weight_decay": args.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=0.0, betas=(args.beta1, args.beta2), eps=args.adam_eps, foreach=False)
        lines, info = [], {"dump_seconds": None, "peak_memory_gib_after_step0": None}
        metrics = open(os.path.join(out_dir, "metrics.jsonl"), "w")
        print(f"\n---- run {run_index + 1} -> {out_dir} ----")
        failed = None
        for step in range(args.steps):
            sync(device)
            t0 = time.perf_counter()
            lr = megatron_lr(step, args.steps, args.lr, args.min_lr, args.warmup_fraction, args.lr_decay_steps,
                             args.lr_decay_style)
            batch = rows.rows_for_step(step, args.global_batch)
            n_sup = int(sum(int(rows.supervised[r]) for r in batch))
            check(n_sup > 0, f"step {step}: the global batch has no supervised target")
            opt.zero_grad(set_to_none=True)
            loss_acc = torch.zeros((), dtype=torch.float64, device=device)
            monitor.armed = step == args.dump_grads_step
            for r in batch:
                ids = torch.from_numpy(np.asarray(rows.tokens[r], dtype=np.int64)).to(device)[None]
                msk = torch.from_numpy(np.asarray(rows.mask[r], dtype=np.int64)).to(device)[None]
                with autocast():
                    logits = causal(input_ids=ids, use_cache=False).logits
                    check(logits.shape[-1] == U, f"logits have {logits.shape[-1]} columns, expected {U}")
                    s = ref.masked_nll_sum(logits, ids, msk)
                (s / n_sup).backward()
                loss_acc += s.detach().double()
                del logits, s
            monitor.armed = False
            if step == 0 and run_index == 0 and islands is not None:
                missed = islands.never_called()
                info_islands_missed = missed
                if missed:
                    print(f"WARNING: fp32 island modules never called (their math runs elsewhere, under autocast): "
                          f"{missed}")
            loss = float(loss_acc) / n_sup
            if step == 0:
                for n, p in params.items():
                    if n in frozen_internal:
                        check(p.grad is None, f"frozen parameter {n} received a gradient")
                    else:
                        check(p.grad is not None, f"trainable parameter {n} has no gradient")
            dump_s = 0.0
            if step == args.dump_grads_step:
                sync(device)
                td = time.perf_counter()
                if run_index == 0:
                    bad = [c for c in train_ckpt
                           if not all(bool(torch.isfinite(g).all()) for g in ref.grad_parts(params, cz_resolved, c))]
                    check(not bad, f"non-finite gradients at step {step}: {bad}")
                    if not args.no_grads_file:
                        path = os.path.join(out_dir, f"grads_step{step}.safetensors")
                        ref.dump_gradients(path, spec, cz_resolved, params, train_ckpt,
                                           metadata={"step": step, "content": "gradients before clipping"})
                        print(f"wrote {path}")
                    if args.compare_grads:
                        errs, problems = ref.gradient_errors_vs_file(args.compare_grads, spec, cz_resolved, params,
                                                                     train_ckpt, device, reference="grad")
                        rep = ref.error_report(errs, problems, step=step, candidate=os.path.abspath(args.compare_grads),
                                               reference=f"train_reference run 1 ({os.path.abspath(out_dir)}), in "
                                                         f"process", definition="||candidate - reference|| / "
                                                                                "||reference|| per tensor")
                        write_json(os.path.join(out_dir, f"grad_errors_step{step}.json"), rep)
                        print(f"gradients of {args.compare_grads} against this run at step {step}: relative L2 error "
                              f"max {rep['max']:.3e} ({rep['worst'][0][0] if rep['worst'] else '-'})"
                              + (f"; problems: {problems}" if problems else ""))
                    if args.repeat_out:
                        saved_grads = {c: [g.detach().to("cpu", copy=True) for g in
                                           ref.grad_parts(params, cz_resolved, c)] for c in train_ckpt}
                    monitor.write_topk(os.path.join(out_dir, f"routing_step{step}.safetensors"))
                    first_topk = {k: torch.cat(v, 0) for k, v in monitor.topk.items()}
                else:
                    errs = ref.gradient_errors_vs_saved(saved_grads, params, cz_resolved, train_ckpt)
                    flips = {k: int((torch.cat(v, 0) != first_topk[k]).any(dim=1).sum()) if k in first_topk else None
                             for k, v in monitor.topk.items()}
                    rep = ref.error_report(errs, step=step, candidate=f"run {run_index + 1}", reference="run 1",
                                           definition="||run_n - run_1|| / ||run_1|| per tensor",
                                           routing_choices_changed_vs_run1=flips)
                    write_json(os.path.join(out_dir, f"grad_noise_step{step}.json"), rep)
                    print(f"run-to-run gradient relative L2 error at step {step}: max {rep['max']:.3e} "
                          f"({rep['worst'][0][0]}); tokens whose routing changed vs run 1: {flips}")
                info["router_margins_step"] = step
                info["router_margins"] = monitor.stats
                sync(device)
                dump_s = time.perf_counter() - td
                info["dump_seconds"] = round(dump_s, 1)
            tp = [p for _, p in trainable]
            if args.clip_grad > 0:
                norm = torch.nn.utils.clip_grad_norm_(tp, args.clip_grad)
            else:
                norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad.float()) for p in tp]))
            grad_norm = float(norm)
            for g in opt.param_groups:
                g["lr"] = lr
            if math.isfinite(loss) and math.isfinite(grad_norm):
                opt.step()
            sync(device)
            dt = time.perf_counter() - t0 - dump_s
            line = {"step": step, "loss": loss if math.isfinite(loss) else None,
                    "grad_norm": grad_norm if math.isfinite(grad_norm) else None, "lr": lr,
                    "tokens": len(batch) * rows.row_tokens, "supervised_tokens": n_sup, "step_time_s": dt}
            metrics.write(json.dumps(line) + "\n")
            metrics.flush()
            lines.append(line)
            if step == 0 and device.type == "cuda":
                info["peak_memory_gib_after_step0"] = gib(torch.cuda.max_memory_allocated(device))
            print(f"step {step:3d}  lr {lr:.4e}  loss {loss:.6f}  grad_norm {grad_norm:.4f}  "
                  f"sup {n_sup}  {dt:.2f} s" + (f"  (+{dump_s:.1f} s dump)" if dump_s else ""), flush=True)
            if not (math.isfinite(loss) and math.isfinite(grad_norm)):
                failed = f"step {step}: loss {loss}, grad_norm {grad_norm}: stopping"
                break
        metrics.close()
        run_info = {
            "run": run_index + 1,
            "losses": [l_["loss"] for l_ in lines],
            "grad_norms": [l_["grad_norm"] for l_ in lines],
            "failed": failed,
            **info,
            "peak_memory_gib": gib(torch.cuda.max_memory_allocated(device)) if device.type == "cuda" else None,
            "args": vars(args),
            "precision": {
                "mode": args.precision,
                "autocast": None if args.precision == "fp32" else "torch.autocast(bfloat16) over forward and loss",
                "fp32_islands": {k: v[1] for k, v in ref.FP32_ISLANDS.items()} if islands else None,
                "fp32_island_modules": islands.counts() if islands else None,
                "fp32_island_modules_never_called": info_islands_missed,
                "master_weights_grads_adam": "float32",
                "tf32": False,
                "bf16_reduced_precision_reduction": False,
            },
            "optimizer": {
                "type": "torch.optim.AdamW(foreach=False)", "betas": [args.beta1, args.beta2], "eps": args.adam_eps,
                "weight_decay": args.weight_decay, "weight_decay_rule": "ndim >= 2 (checkpoint and transformers "
                "layouts agree); 0 on 1-D", "clip": "torch.nn.utils.clip_grad_norm_ (g *= min(1, c/(norm+1e-6)))",
                "lr_schedule": "Megatron: warm-up W = fraction*decay steps from 0 (step 0 at lr 0), then "
                               f"{args.lr_decay_style} to min_lr",
            },
            "loss_definition": "sum over rows r of the global batch and t of mask[r][t+1] * -log_softmax(logits[r][t])"
                               "[tokens[r][t+1]] / sum of mask[r][t+1] over the global batch; softmax over the "
                               "unpadded vocabulary",
            "row_order": "step k: rows (k*R + i) mod n, i < R (quill rows_for_step)",
            "frozen": mg.FROZEN_PATTERNS,
            "buffers": mg.BUFFER_PATTERNS,
            "trainable_tensors": len(train_ckpt),
            "trainable_values": n_train,
            "rows": {"dir": os.path.abspath(args.rows), "rows": rows.rows, "row_tokens": rows.row_tokens,
                     "rows_sha256": rows.manifest.get("rows_sha256")},
            "init": {"dir": os.path.abspath(args.init), "file_dtypes": sorted(set(file_dtypes.values())),
                     "embed_norm_internal_name": embed_norm_name},
            "loading": "InklingForConditionalGeneration.from_pretrained (fp32, CPU) -> every text weight checked "
                       "against model.safetensors -> InklingForCausalLM on the device",
            "device": gpu,
            "transformers_version": ref.transformers.__version__,
            "torch_version": torch.__version__,
            "command": command,
            "seconds_since_start": round(time.time() - t_start, 1),
        }
        write_json(os.path.join(out_dir, "run.json"), run_info)
        print(f"run {run_index + 1}: loss {lines[0]['loss']} -> {lines[-1]['loss']} over {len(lines)} steps; "
              f"peak memory {run_info['peak_memory_gib']} GiB")
        if failed:
            print("TRAIN_REFERENCE: " + failed, file=sys.stderr)
            exit_code = 1
            break
    monitor.remove()
    print(f"done in {time.time() - t_start:.1f} s")
    if exit_code == 0:
        print("OK")
    sys.exit(exit_code)


if __name__ == "__main__":
    main()
