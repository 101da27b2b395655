#!/usr/bin/env python3
"""Checks quill's Hugging Face exports as a user of transformers meets them (issue 27).

Usage:
    check_export.py --plan PLAN.json [--json OUT.json] [--static-only]
    check_export.py --export DIR --rows ROWS --quill-metrics EVAL/metrics.jsonl [--rows-count 4] [--tol 1e-5]
                    [--device cpu|cuda] [--golden NAMES.json] [--init INIT_DIR] [--name NAME] [--json OUT.json]
    check_export.py --merge A.json B.json ... --json OUT.json

PLAN.json: {"cases": [{"name", "export", "rows", "rows_count", "quill_metrics", "tol", "device", "golden"?,
"init"?, "check_values"? (default true)}, ...]}. For each export directory, in order:

 1. Static (plain Python, no torch): config.json names one class (architectures[0]) and one form: release
    (InklingForConditionalGeneration, a multimodal config with text_config) or transformers (InklingForCausalLM,
    a text config); the tensor names are in that same form; config.json's `dtype` is the tensors' dtype, tensor by
    tensor, under quill's rule (bfloat16: BF16 except the router's bias and global scale, and in the transformers
    form the short convs, in F32; float32: all F32); with --golden, the tensor names and shapes equal the golden
    list's (tests/fixtures/hf/names; dtypes too when the golden list is in the same dtype); with --init (a release
    checkpoint), config.json is the init's own, every key kept, dtype keys aside.
 2. Loading: the class config.json names, from_pretrained(dtype=float32, eager attention and experts,
    output_loading_info). Fails on any unexpected or mismatched key, any loading error, and any missing key, except
    the vision/audio tower keys of a release export that holds no tower tensors (make_init.py's checkpoints have
    none: InklingForConditionalGeneration then reports exactly those missing, tests/fixtures/hf/names/
    tiny.release.json). transformers' own reading of the config's dtype (config_class.from_pretrained(DIR).dtype)
    must be the tensors' dtype. Every loaded text weight must equal the file's tensor (under make_golden's explicit
    map for the release form; "check_values": false skips this, for the slice's 4.6 billion values).
 3. Loss: transformers' masked per-token loss over rows 0..R-1 of the quill rows directory (quill's step-0 batch,
    src/train/trainer.cc rows_for_step), each row its own sequence, fp32, no TF32: sum over t of
    mask[t+1] * -log softmax(logits[t])[token[t+1]] over the batch, divided by the batch's supervised targets
    (make_golden.masked_loss). The model: InklingForCausalLM itself, or for a release export InklingForCausalLM
    holding the loaded InklingForConditionalGeneration's text model and lm_head (the modules themselves, no copy):
    transformers 5.17's InklingForConditionalGeneration applies embed_norm twice (tools/parity/README.md, notes), so
    its own forward's loss is reported beside it, not compared. quill's loss at the same weights is step 0's loss in
    --quill-metrics (`quill train --init EXPORT --steps 1 --global-batch R --lr 0`: step 0's loss is computed before
    the first optimizer step). The relative difference must be at most --tol.

Prints a table; --json writes every figure. Exit status 0 when every case passes, 1 otherwise, 2 on bad input.
--static-only does step 1 alone (no torch): the scripts' dry run on a machine without torch.
"""

import argparse
import copy
import json
import math
import os
import struct
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))

RELEASE_CLASS = "InklingForConditionalGeneration"
TRANSFORMERS_CLASS = "InklingForCausalLM"
TOWER_MODEL_PREFIXES = ("model.vision_tower.", "model.audio_tower.")
TOWER_FILE_PREFIXES = ("model.visual", "model.audio.")
RELEASE_TEXT_PREFIX = "model.llm."
TRANSFORMERS_TEXT_PREFIXES = ("model.layers.", "model.embed_tokens.", "model.embed_norm.", "model.norm.", "lm_head.")
CONFIG_DTYPE = {"bfloat16": "BF16", "float32": "F32"}


class CheckError(Exception):
    pass


def need(cond, msg):
    if not cond:
        raise CheckError(msg)


# --------------------------------------------------------------------------------------------------
# Static checks (plain Python)
# --------------------------------------------------------------------------------------------------


def read_header(path):
    with open(path, "rb") as f:
        raw = f.read(8)
        need(len(raw) == 8, f"{path}: too short for a safetensors file")
        (n,) = struct.unpack("<Q", raw)
        need(n <= 100_000_000, f"{path}: bad header length {n}")
        header = json.loads(f.read(n).decode("utf-8"))
    header.pop("__metadata__", None)
    return header


def export_tensors(export):
    """{name: (shape tuple, dtype)} over model.safetensors or the shards its index lists; and {name: file}."""
    single = os.path.join(export, "model.safetensors")
    index = os.path.join(export, "model.safetensors.index.json")
    files = {}
    if os.path.exists(single):
        files = {n: single for n in read_header(single)}
    else:
        need(os.path.exists(index), f"{export}: neither model.safetensors nor model.safetensors.index.json")
        with open(index) as f:
            weight_map = json.load(f)["weight_map"]
        headers = {}
        for name, shard in weight_map.items():
            path = os.path.join(export, shard)
            if path not in headers:
                need(os.path.exists(path), f"{index}: shard {shard} missing")
                headers[path] = read_header(path)
            need(name in headers[path], f"{index}: {name} is not in {shard}")
            files[name] = path
    out = {}
    headers = {}
    for name, path in files.items():
        if path not in headers:
            headers[path] = read_header(path)
        e = headers[path][name]
        out[name] = (tuple(e["shape"]), e["dtype"])
    return out, files


def load_json(path, what):
    need(os.path.exists(path), f"{path}: missing ({what})")
    with open(path) as f:
        try:
            return json.load(f)
        except json.JSONDecodeError as ex:
            raise CheckError(f"{path}: not valid JSON ({ex})")


def form_of_config(cfg, path):
    archs = cfg.get("architectures")
    need(isinstance(archs, list) and len(archs) == 1, f"{path}: architectures is {archs!r}, expected one class")
    cls = archs[0]
    if cls == RELEASE_CLASS:
        need("text_config" in cfg, f"{path}: names {cls} but has no text_config")
        need(cfg.get("model_type") == "inkling_mm_model", f"{path}: {cls} with model_type {cfg.get('model_type')!r}")
        return "release", cls
    if cls == TRANSFORMERS_CLASS:
        need("text_config" not in cfg, f"{path}: names {cls} but is a multimodal config (text_config)")
        need(cfg.get("model_type") == "inkling_text", f"{path}: {cls} with model_type {cfg.get('model_type')!r}")
        return "transformers", cls
    raise CheckError(f"{path}: architectures[0] is {cls!r}, not {RELEASE_CLASS} or {TRANSFORMERS_CLASS}")


def form_of_names(names, export):
    release = [n for n in names if n.startswith(RELEASE_TEXT_PREFIX)]
    hf = [n for n in names if n.startswith(TRANSFORMERS_TEXT_PREFIXES)]
    if release and hf:
        raise CheckError(f"{export}: both release ({release[0]}) and transformers ({hf[0]}) tensor names")
    need(release or hf, f"{export}: no text-model tensor in either form")
    return "release" if release else "transformers"


def is_text_tensor(name, form):
    return name.startswith(RELEASE_TEXT_PREFIX) if form == "release" else name.startswith(TRANSFORMERS_TEXT_PREFIXES)


def expected_dtype(name, form, config_dtype):
    """quill's rule (src/io/hf_export.cc hf_export_dtype), in checkpoint names."""
    if config_dtype == "float32":
        return "F32"
    if form == "release":
        f32 = name.endswith((".mlp.gate.bias", ".mlp.gate.global_scale"))
    else:
        f32 = name.endswith((".mlp.gate.e_score_correction_bias", ".mlp.gate.global_scale", "sconv.conv1d.weight"))
    return "F32" if f32 else "BF16"


def read_golden(path):
    g = load_json(path, "golden names")
    rows = g["tensors"] if isinstance(g, dict) else g
    return {r[0]: (tuple(r[1]), r[2]) for r in rows}


def static_check(case):
    export = case["export"]
    cfg_path = os.path.join(export, "config.json")
    cfg = load_json(cfg_path, "the export's config")
    form, cls = form_of_config(cfg, cfg_path)
    tensors, _ = export_tensors(export)
    names_form = form_of_names(tensors, export)
    need(names_form == form, f"{export}: config.json is the {form} form ({cls}), the tensor names are the "
                             f"{names_form} form")
    dtype = cfg.get("dtype")
    need(dtype in CONFIG_DTYPE, f"{cfg_path}: dtype is {dtype!r}, expected bfloat16 or float32")
    need("torch_dtype" not in cfg or cfg["torch_dtype"] == dtype,
         f"{cfg_path}: torch_dtype {cfg.get('torch_dtype')!r} disagrees with dtype {dtype!r}")
    if form == "release":
        tdt = cfg["text_config"].get("torch_dtype", cfg["text_config"].get("dtype", dtype))
        need(tdt == dtype, f"{cfg_path}: text_config's dtype {tdt!r} disagrees with dtype {dtype!r}")
    wrong = [(n, d, expected_dtype(n, form, dtype)) for n, (_, d) in sorted(tensors.items())
             if is_text_tensor(n, form) and d != expected_dtype(n, form, dtype)]
    need(not wrong, f"{export}: config.json says {dtype}, but " +
         ", ".join(f"{n} is {d} (expected {e})" for n, d, e in wrong[:5]) + (" ..." if len(wrong) > 5 else ""))
    text = {n: v for n, v in tensors.items() if is_text_tensor(n, form)}
    other = sorted(n for n in tensors if n not in text)
    res = {"form": form, "class": cls, "dtype": dtype, "tensors": len(tensors), "text_tensors": len(text),
           "pass_through": len(other), "tower_tensors": sum(n.startswith(TOWER_FILE_PREFIXES) for n in other),
           "bytes": sum(math.prod(s) * (4 if d == "F32" else 2) for s, d in tensors.values())}
    if case.get("golden"):
        golden = read_golden(case["golden"])
        missing = sorted(set(golden) - set(text))
        extra = sorted(set(text) - set(golden))
        need(not missing and not extra, f"{export} against {case['golden']}: missing {missing[:5]}, extra {extra[:5]}")
        shapes = [n for n in golden if golden[n][0] != text[n][0]]
        need(not shapes, f"{export}: shapes differ from {case['golden']}: " +
             ", ".join(f"{n} {text[n][0]} vs {golden[n][0]}" for n in shapes[:5]))
        golden_dtype = "float32" if all(d == "F32" for _, d in golden.values()) else "bfloat16"
        compared = golden_dtype == dtype
        if compared:
            dts = [n for n in golden if golden[n][1] != text[n][1]]
            need(not dts, f"{export}: dtypes differ from {case['golden']}: " +
                 ", ".join(f"{n} {text[n][1]} vs {golden[n][1]}" for n in dts[:5]))
        res["golden"] = {"file": case["golden"], "names": len(golden), "missing": 0, "extra": 0,
                         "dtypes_compared": compared}
    if case.get("init"):
        init_cfg = load_json(os.path.join(case["init"], "config.json"), "the init's config")
        strip = lambda c: {k: v for k, v in c.items() if k not in ("dtype", "torch_dtype")}
        a, b = strip(cfg), strip(init_cfg)
        a["text_config"], b["text_config"] = strip(a.get("text_config", {})), strip(b.get("text_config", {}))
        diff = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
        need(not diff, f"{cfg_path}: differs from the init's config.json in {diff} (dtype keys aside)")
        res["config_is_the_inits"] = True
    return res


# --------------------------------------------------------------------------------------------------
# Loading and loss (torch, transformers)
# --------------------------------------------------------------------------------------------------


def torch_check(case, static, res):
    """Loading and loss; figures go into res as they are known (a failure keeps those already found)."""
    import numpy as np
    import torch
    import torch.nn.functional as F

    sys.path.insert(0, HERE)
    import make_golden as mg  # noqa: E402 (transformers and its Inkling modules)
    from parity_io import RowsDir  # noqa: E402
    from safetensors import safe_open  # noqa: E402

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    device = torch.device(case.get("device", "cpu"))
    export = case["export"]
    cls = getattr(mg.mdl_mod, static["class"])  # transformers' modeling_inkling
    t0 = time.time()

    # transformers' own reading of the config's dtype (what from_pretrained(dtype="auto") would build)
    cfg_cls = mg.cfg_mod.InklingConfig if static["form"] == "release" else mg.cfg_mod.InklingTextConfig
    read = getattr(cfg_cls.from_pretrained(export), "dtype", None)
    read = str(read).replace("torch.", "") if read is not None else None
    res["config_dtype_read"] = read
    need(read == static["dtype"], f"{export}: transformers reads the config's dtype as {read!r}, the tensors are "
                                  f"{static['dtype']}")

    kwargs = dict(dtype=torch.float32, attn_implementation="eager", output_loading_info=True)
    try:
        model, info = cls.from_pretrained(export, experts_implementation="eager", **kwargs)
    except TypeError as ex:
        print(f"note: from_pretrained rejected experts_implementation ({ex}); retrying without it")
        model, info = cls.from_pretrained(export, **kwargs)
    model.eval()
    mg.set_eager(model, static["class"])
    load_s = time.time() - t0

    def listed(key):
        v = info.get(key) or []
        return sorted(str(x) for x in (v if not isinstance(v, (str, bytes)) else [v]))

    missing, unexpected = listed("missing_keys"), listed("unexpected_keys")
    mismatched, errors = listed("mismatched_keys"), listed("error_msgs")
    towers_allowed = static["form"] == "release" and static["tower_tensors"] == 0
    tower_missing = [k for k in missing if towers_allowed and k.startswith(TOWER_MODEL_PREFIXES)]
    other_missing = [k for k in missing if k not in tower_missing]
    others = {k: listed(k) for k in info if k not in ("missing_keys", "unexpected_keys", "mismatched_keys",
                                                         "error_msgs") and listed(k)}
    model_keys = list(model.state_dict().keys())
    res.update({"config_dtype_read": read, "model_keys": len(model_keys), "loaded": len(model_keys) - len(missing),
                "missing": len(other_missing), "missing_towers": len(tower_missing), "unexpected": len(unexpected),
                "mismatched": len(mismatched), "load_errors": len(errors), "load_s": round(load_s, 1)})
    need(not other_missing and not unexpected and not mismatched and not errors,
         f"{export}: loading with {static['class']}: missing {other_missing[:8]}, unexpected {unexpected[:8]}, "
         f"mismatched {mismatched[:8]}, errors {errors[:3]}")
    if others:
        print(f"WARNING: loading info also reports {others}")

    # Every loaded text weight equals the file's tensor.
    tensors, files = export_tensors(export)
    handles = {}

    def file_tensor(name):
        path = files[name]
        if path not in handles:
            handles[path] = safe_open(path, framework="pt")
        return handles[path].get_tensor(name).float()

    check_values = bool(case.get("check_values", True))
    if static["form"] == "transformers":
        sd = model.state_dict()
        for name in tensors:
            need(name in sd, f"{export}: tensor {name} is not a key of {static['class']}")
            need(not check_values or torch.equal(sd[name].detach().float(), file_tensor(name)),
                 f"{export}: {name} loaded differs from the file")
        text_model, causal = model.model, model
    else:
        tc = {k: (list(v) if isinstance(v, (list, tuple)) else v)
              for k, v in model.config.text_config.to_dict().items()}
        spec = mg.ckpt_spec(tc)
        text_model = model.model.language_model
        resolved, _ = mg.resolve_internal(spec, set(text_model.state_dict().keys()), "model.language_model.")
        mg.check_coverage(spec, resolved, model, text_model, "model.language_model.", static["class"])

        class Weights:
            def __getitem__(self, name):
                return file_tensor(name)

        if check_values:
            mg.check_weights_equal(spec, resolved, model, Weights(), f"{static['class']} from {export}")
        # InklingForCausalLM holding the loaded text model and lm_head (built on the meta device: no allocation).
        text_cfg = model.config.text_config
        try:
            with torch.device("meta"):
                causal = mg.mdl_mod.InklingForCausalLM(copy.deepcopy(text_cfg))
        except Exception as ex:  # a transformers that cannot build on meta: build it on the CPU
            print(f"note: building InklingForCausalLM on the meta device failed ({ex!r}); building it on the CPU")
            causal = mg.mdl_mod.InklingForCausalLM(copy.deepcopy(text_cfg))
        causal.model = text_model
        causal.lm_head = model.lm_head
        causal.config = text_cfg  # the config the loaded modules read
        mg.set_eager(causal, "InklingForCausalLM holding the loaded text model")
        need(not any(t.is_meta for t in list(causal.parameters()) + list(causal.buffers())),
             "InklingForCausalLM kept a meta tensor besides the text model and lm_head")
        causal.eval()
    res["weights_equal_file"] = True if check_values else "not checked"
    handles.clear()

    model.to(device)
    rows = RowsDir(case["rows"])
    R = int(case.get("rows_count", 4))
    need(rows.rows >= R, f"{case['rows']}: {rows.rows} rows, the check needs {R}")
    U = causal.config.unpadded_vocab_size or causal.config.vocab_size
    need(rows.max_token_id < U, f"{case['rows']}: token id {rows.max_token_id} outside the vocabulary {U}")

    def batch_loss(forward):
        num, den = 0.0, 0
        for r in range(R):  # quill's step 0: rows 0..R-1
            ids = torch.from_numpy(np.asarray(rows.tokens[r], dtype=np.int64)).to(device)[None]
            mask = torch.from_numpy(np.asarray(rows.mask[r], dtype=np.int64)).to(device)[None]
            with torch.no_grad():
                logits = forward(ids)[..., :U]
                pos = torch.nonzero(mask[0, 1:], as_tuple=True)[0]
                lg = logits[0, :-1].index_select(0, pos).float()
                tgt = ids[0, 1:].index_select(0, pos)
                num += float(F.cross_entropy(lg, tgt, reduction="sum").double())
                den += int(pos.numel())
            del logits
        need(den > 0, "the rows have no supervised target")
        return num / den, den

    t1 = time.time()
    loss, supervised = batch_loss(lambda ids: causal(input_ids=ids, use_cache=False).logits)
    res.update(loss_transformers=loss, supervised_targets=supervised, rows=R, loss_device=str(device),
               loss_model="InklingForCausalLM" if static["form"] == "transformers" else
               "InklingForCausalLM holding InklingForConditionalGeneration's text model and lm_head")
    if static["form"] == "release":
        own, _ = batch_loss(lambda ids: model(input_ids=ids, use_cache=False).logits)
        res["loss_own_forward"] = own
    res["loss_s"] = round(time.time() - t1, 1)
    del model, causal
    if device.type == "cuda":
        torch.cuda.empty_cache()


# --------------------------------------------------------------------------------------------------
# Cases, table, summary
# --------------------------------------------------------------------------------------------------


def quill_loss(path):
    need(os.path.exists(path), f"{path}: missing (quill's evaluation at the export's weights)")
    with open(path) as f:
        lines = [json.loads(l) for l in f if l.strip()]
    need(lines and lines[0].get("step") == 0, f"{path}: no step 0")
    return float(lines[0]["loss"]), int(lines[0].get("supervised_tokens", -1))


def run_case(case, static_only):
    res = {"name": case["name"], "export": case["export"], "ok": False}
    try:
        res.update(static_check(case))
        if case.get("quill_metrics"):
            res["loss_quill"], res["quill_supervised"] = quill_loss(case["quill_metrics"])
        if static_only:
            res["ok"] = True
            res["note"] = "static checks only (no torch)"
            return res
        torch_check(case, res, res)
        need("loss_quill" in res, "no quill loss to compare (quill_metrics)")
        need(res["quill_supervised"] in (-1, res["supervised_targets"]),
             f"quill's step 0 had {res['quill_supervised']} supervised targets, transformers' rows "
             f"{res['supervised_targets']}: not the same rows")
        res["rel_diff"] = abs(res["loss_transformers"] - res["loss_quill"]) / abs(res["loss_quill"])
        res["tol"] = float(case.get("tol", 1e-5))
        res["ok"] = res["rel_diff"] <= res["tol"]
        if not res["ok"]:
            res["error"] = f"loss differs by {res['rel_diff']:.3e} relative, more than {res['tol']:.0e}"
    except CheckError as ex:
        res["error"] = str(ex)
    except SystemExit as ex:  # make_golden's fail() prints its message and exits
        res["error"] = f"a transformers-side check failed (see above; exit {ex.code})"
    return res


def table(results):
    head = (f"{'case':<22} {'form':<12} {'class':<32} {'dtype':<8} {'tensors':>7} {'loaded':>6} {'miss':>4} "
            f"{'tower':>5} {'unexp':>5} {'loss transformers':>17} {'loss quill':>12} {'rel diff':>9} {'tol':>6}  ok")
    lines = [head, "-" * len(head)]
    for r in results:
        f = lambda k, fmt="{}": fmt.format(r[k]) if k in r else "-"
        lines.append(f"{r['name']:<22} {f('form'):<12} {f('class'):<32} {f('dtype'):<8} {f('tensors'):>7} "
                     f"{f('loaded'):>6} {f('missing'):>4} {f('missing_towers'):>5} {f('unexpected'):>5} "
                     f"{f('loss_transformers', '{:.7f}'):>17} {f('loss_quill', '{:.7f}'):>12} "
                     f"{f('rel_diff', '{:.2e}'):>9} {f('tol', '{:.0e}'):>6}  {'yes' if r['ok'] else 'NO'}")
    for r in results:
        if "loss_own_forward" in r:
            lines.append(f"  {r['name']}: InklingForConditionalGeneration's own forward (embed_norm twice in 5.17): "
                         f"loss {r['loss_own_forward']:.7f} (not compared)")
        if r.get("error"):
            lines.append(f"  {r['name']}: FAILED: {r['error']}")
    return "\n".join(lines)


def versions():
    out = {"python": sys.version.split()[0]}
    for mod in ("torch", "transformers", "safetensors"):
        try:
            out[mod] = __import__(mod).__version__
        except Exception:  # not installed (the dry run)
            out[mod] = None
    return out


def write_json(path, obj):
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--plan")
    ap.add_argument("--export")
    ap.add_argument("--rows")
    ap.add_argument("--rows-count", type=int, default=4)
    ap.add_argument("--quill-metrics")
    ap.add_argument("--tol", type=float, default=1e-5)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--golden")
    ap.add_argument("--init")
    ap.add_argument("--name")
    ap.add_argument("--json")
    ap.add_argument("--static-only", action="store_true")
    ap.add_argument("--merge", nargs="+", help="summary JSON files to merge into --json (no checks run)")
    args = ap.parse_args()

    if args.merge:
        results = []
        for p in args.merge:
            if os.path.exists(p):
                results += load_json(p, "a summary")["cases"]
            else:
                results.append({"name": os.path.basename(p), "ok": False, "error": f"{p}: missing (its phase failed)"})
        print(table(results))
        if args.json:
            write_json(args.json, {"cases": results, "ok": all(r["ok"] for r in results), "versions": versions()})
        return 0 if results and all(r["ok"] for r in results) else 1

    try:
        if args.plan:
            cases = load_json(args.plan, "the plan")["cases"]
        else:
            need(args.export, "give --plan, --export or --merge")
            cases = [{"name": args.name or os.path.basename(os.path.normpath(args.export)), "export": args.export,
                      "rows": args.rows, "rows_count": args.rows_count, "quill_metrics": args.quill_metrics,
                      "tol": args.tol, "device": args.device, "golden": args.golden, "init": args.init}]
        for c in cases:
            need(c.get("name") and c.get("export"), f"plan case {c} needs name and export")
            need(args.static_only or c.get("rows"), f"case {c['name']}: needs rows")
    except CheckError as ex:
        print(f"check_export: {ex}", file=sys.stderr)
        return 2

    results = []
    for c in cases:
        t0 = time.time()
        print(f"[check_export] {c['name']}: {c['export']}", flush=True)
        r = run_case(c, args.static_only)
        r["seconds"] = round(time.time() - t0, 1)
        results.append(r)
        print(f"[check_export] {c['name']}: {'ok' if r['ok'] else 'FAILED: ' + r.get('error', '')} ({r['seconds']} s)",
              flush=True)
    print(table(results))
    if args.json:
        write_json(args.json, {"cases": results, "ok": all(r["ok"] for r in results), "versions": versions(),
                               "static_only": args.static_only})
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
