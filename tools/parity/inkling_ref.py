"""Shared code of the GPU parity tools (make_init.py, train_reference.py): the transformers side.

It reuses make_golden.py's pieces unchanged (config checks, the checkpoint name/layout map, transformers
loading checks) and adds what the bf16 GPU parity needs:
  - the "real model" initialisation and the release's checkpoint dtypes (BF16, with gate.bias and
    gate.global_scale in F32), written tensor by tensor;
  - loading a release-format directory through InklingForConditionalGeneration.from_pretrained, checking
    every loaded text weight against the file, and copying it into an InklingForCausalLM on the GPU;
  - the fp32 islands of architecture.md's precision policy on top of torch.autocast(bfloat16);
  - the masked loss, the gradient dump in checkpoint names and layout, a router margin monitor.
"""

import copy
import math
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import make_golden as mg  # noqa: E402  (imports transformers and the Inkling modules)
from parity_io import SafetensorsReader, SafetensorsWriter  # noqa: E402

transformers = mg.transformers
cfg_mod = mg.cfg_mod
mdl_mod = mg.mdl_mod

# --------------------------------------------------------------------------------------------------
# Failure reporting: make_golden's check()/fail() print "MAKE_GOLDEN FAILED"; the parity tools name
# themselves instead (make_golden's functions look fail up as a module global).
# --------------------------------------------------------------------------------------------------

_TOOL = ["PARITY"]


def fail(msg):
    print("\n" + "=" * 100, file=sys.stderr)
    print(f"{_TOOL[0]} FAILED: {msg}", file=sys.stderr)
    print("=" * 100, file=sys.stderr)
    raise SystemExit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def set_tool(name):
    _TOOL[0] = name
    mg.fail = fail


# --------------------------------------------------------------------------------------------------
# Initialisation "like a real model" and the release's dtypes
# --------------------------------------------------------------------------------------------------

INIT_SCHEME = {
    "embed": "0.02 * N",
    "unembed": "0.02 * N",
    "linear": "0.02 * N (every matrix and expert bank, the router included)",
    "norm": "1 + 0.1 * N (embed_norm, attn_norm, mlp_norm, final norm, q_norm, k_norm)",
    "scale": "1 exactly (mlp.global_scale, mlp.gate.global_scale; no draw)",
    "sconv": "0.2 * N",
    "rel": "0.5 * N",
    "router_bias": "0.05 * N",
    "order": "one torch.randn of the full checkpoint shape per tensor, in make_golden.ckpt_spec order, from one "
             "generator seeded with --seed (no draw for the scales)",
}
# The release stores these in F32 and everything else in BF16 (docs/model.md: the index total_size is
# matched exactly by 40 router bias vectors and 40 router global scales in F32).
RELEASE_F32_SUFFIXES = (".mlp.gate.bias", ".mlp.gate.global_scale")


def checkpoint_dtype(name, all_fp32):
    return "F32" if all_fp32 or name.endswith(RELEASE_F32_SUFFIXES) else "BF16"


def init_tensor(init, shape, gen, device):
    if init == "scale":
        return torch.ones(shape, dtype=torch.float32, device=device)
    z = torch.randn(shape, generator=gen, dtype=torch.float32, device=device)
    if init in ("embed", "unembed", "linear"):
        return z * 0.02
    if init == "norm":
        return 1.0 + 0.1 * z
    if init == "sconv":
        return 0.2 * z
    if init == "rel":
        return 0.5 * z
    if init == "router_bias":
        return 0.05 * z
    raise ValueError(init)


def tensor_bytes_for(t, dtype):
    """A CPU numpy array holding t's little-endian bytes in the checkpoint dtype (BF16 as int16 bits)."""
    if dtype == "BF16":
        return t.to(torch.bfloat16).contiguous().cpu().view(torch.int16).numpy()
    if dtype == "F32":
        return t.to(torch.float32).contiguous().cpu().numpy()
    raise ValueError(dtype)


def build_mm_config(text):
    """The multimodal InklingConfig (model_type inkling_mm_model) around a transformers-schema text config, as
    make_golden writes it."""
    mm_cfg = cfg_mod.InklingConfig(text_config=dict(text), vision_config=dict(mg.VISION_CONFIG),
                                   audio_config=dict(mg.AUDIO_CONFIG))
    mm_cfg.architectures = ["InklingForConditionalGeneration"]
    check(mm_cfg.model_type == "inkling_mm_model", f"InklingConfig.model_type is {mm_cfg.model_type}")
    mg.verify_text_config(mm_cfg.text_config, text, "built InklingConfig")
    return mm_cfg


# --------------------------------------------------------------------------------------------------
# Loading through transformers
# --------------------------------------------------------------------------------------------------

TC_KEYS = list(mg.REQUIRED_TEXT_KEYS) + ["conv_kernel_size"]


def tc_from_config(cfg):
    """Plain text-config values (for shapes) from a loaded InklingTextConfig."""
    out = {}
    for k in TC_KEYS:
        check(hasattr(cfg, k), f"loaded text config lacks {k}")
        v = getattr(cfg, k)
        out[k] = list(v) if isinstance(v, (list, tuple)) else v
    return out


def _writable_f32(reader, name):
    """A tensor of a safetensors file as a fresh, writable float32 numpy array."""
    arr = SafetensorsReader.to_f32(reader.raw(name), reader.dtype(name))
    if isinstance(arr, np.memmap) or not arr.flags.writeable:  # file-backed (F32): copy
        arr = np.array(arr, dtype=np.float32, copy=True)
    return arr


class FileWeights:
    """Checkpoint tensors read lazily from model.safetensors as fp32 CPU tensors (make_golden's
    check_weights_equal indexes it by checkpoint name)."""

    def __init__(self, path):
        self.reader = SafetensorsReader(path)

    def keys(self):
        return self.reader.keys()

    def __getitem__(self, name):
        check(name in self.reader.header, f"{self.reader.path}: tensor {name} missing")
        return torch.from_numpy(_writable_f32(self.reader, name))


def load_mm(init_dir):
    """InklingForConditionalGeneration.from_pretrained on the CPU in fp32, eager attention and experts,
    with make_golden's loading checks (no unexpected or mismatched key, no missing text key)."""
    load_kwargs = dict(dtype=torch.float32, attn_implementation="eager", output_loading_info=True)
    try:
        mm, info = mdl_mod.InklingForConditionalGeneration.from_pretrained(
            init_dir, experts_implementation="eager", **load_kwargs)
    except TypeError as ex:
        print(f"note: from_pretrained rejected experts_implementation ({ex}); retrying without it")
        mm, info = mdl_mod.InklingForConditionalGeneration.from_pretrained(init_dir, **load_kwargs)
    bad, n_tower_missing = mg.loading_report(info)
    check(not bad, "loading the release-named checkpoint reported problems:\n  " + "\n  ".join(bad))
    check(mm.config.model_type == "inkling_mm_model", "reloaded config is not inkling_mm_model")
    mg.set_eager(mm, "InklingForConditionalGeneration")
    mm.eval()
    check(isinstance(mm.model.language_model, mdl_mod.InklingTextModel),
          "mm.model.language_model is not InklingTextModel")
    return mm, n_tower_missing


def check_file_matches_spec(path, spec, expect_dtypes=None):
    rd = SafetensorsReader(path)
    names = {e["name"] for e in spec}
    keys = set(rd.keys())
    check(keys == names, f"{path}: tensors differ from the config's checkpoint map.\n  in file only: "
                         f"{sorted(keys - names)}\n  in map only: {sorted(names - keys)}")
    dtypes = {}
    for e in spec:
        check(rd.shape(e["name"]) == tuple(e["shape"]),
              f"{path}: {e['name']} has shape {rd.shape(e['name'])}, the config says {tuple(e['shape'])}")
        dtypes[e["name"]] = rd.dtype(e["name"])
        if expect_dtypes is not None:
            check(rd.dtype(e["name"]) == expect_dtypes[e["name"]],
                  f"{path}: {e['name']} is {rd.dtype(e['name'])}, expected {expect_dtypes[e['name']]}")
    return dtypes


def build_causal(mm, spec, device):
    """A fresh InklingForCausalLM on `device` holding the loaded model.language_model and lm_head (fp32)."""
    text_cfg = copy.deepcopy(mm.config.text_config)
    try:
        with torch.device(device):
            causal = mdl_mod.InklingForCausalLM(copy.deepcopy(text_cfg))
    except Exception as ex:  # pragma: no cover - fallback for a transformers that dislikes a device context
        print(f"note: building InklingForCausalLM under torch.device({device!r}) failed ({ex!r}); building on the "
              f"CPU and moving it")
        causal = mdl_mod.InklingForCausalLM(copy.deepcopy(text_cfg))
    causal.to(device=device, dtype=torch.float32)
    mg.set_eager(causal, "InklingForCausalLM")
    copy_weights(mm, causal)
    resolved, _ = mg.resolve_internal(spec, set(causal.model.state_dict().keys()), "model.")
    mg.check_coverage(spec, resolved, causal, causal.model, "model.", "InklingForCausalLM")
    return causal, resolved


def copy_weights(mm, causal):
    with torch.no_grad():
        causal.model.load_state_dict(mm.model.language_model.state_dict(), strict=True)
        causal.lm_head.weight.copy_(mm.lm_head.weight)


def check_same_weights(spec, resolved_a, model_a, resolved_b, model_b, where):
    """Every mapped tensor of model_b equals model_a's (any devices)."""
    for e in spec:
        for na, nb in zip(resolved_a[e["name"]], resolved_b[e["name"]]):
            a = mg.get_tensor(model_a, na).detach()
            b = mg.get_tensor(model_b, nb).detach()
            check(a.dtype == b.dtype == torch.float32 and tuple(a.shape) == tuple(b.shape),
                  f"{where}: {nb}: {b.dtype} {tuple(b.shape)} vs {a.dtype} {tuple(a.shape)}")
            check(torch.equal(a.to(b.device), b), f"{where}: {nb} differs from {na}")


# --------------------------------------------------------------------------------------------------
# Precision policy: fp32 islands under autocast (architecture.md: fp32 for RMSNorm statistics, softmax,
# the short convolutions, the router and the loss; docs/decisions/cuda-precision.md: the router and the
# relative-bias tables compute from the fp32 master)
# --------------------------------------------------------------------------------------------------

# Which modules: found through the checkpoint name map (so a renamed transformers class cannot hide one):
#   router        the module owning mlp.gate.weight                 -> model.layers.{i}.mlp.gate
#   rel           the module owning attn.rel_logits_proj.proj       -> model.layers.{i}.self_attn.rel_logits_proj
#   sconv         the module owning {k,v}_sconv / {attn,mlp}_sconv .conv1d.weight (the residual short conv)
FP32_ISLANDS = {
    # kind: (cast floating inputs to fp32, why)
    "router": (True, "router logits, sigmoid, top-k and weights in fp32 (docs/model.md: select in fp32)"),
    "rel": (True, "relative-bias table product r @ P in fp32 (bf16 r, fp32 table)"),
    "sconv": (False, "short convolution in fp32 (transformers casts to fp32, but autocast would run conv1d in "
                     "bf16); output in the input's dtype"),
}


def _as_f32(x):
    return x.float() if torch.is_tensor(x) and x.is_floating_point() else x


def _owner(param_name, suffix):
    check(param_name.endswith(suffix), f"{param_name} does not end with {suffix}")
    return param_name[: -len(suffix)]


def island_modules(spec, resolved):
    """{module name: kind} of the fp32 islands, from the checkpoint map (names relative to the model root)."""
    out = {}
    for e in spec:
        n = e["name"]
        if n.endswith(".mlp.gate.weight"):
            out[_owner(resolved[n][0], ".weight")] = "router"
        elif n.endswith(".attn.rel_logits_proj.proj"):
            out[_owner(resolved[n][0], ".proj")] = "rel"
        elif e["init"] == "sconv":
            out[_owner(resolved[n][0], ".conv1d.weight")] = "sconv"
    return out


class Fp32Islands:
    """Wraps the forward of each island module: floating inputs to fp32 where the kind says so, autocast off
    inside. Counts calls, so a module whose forward is never called (its math moved elsewhere in a newer
    transformers) is reported instead of silently running in bf16."""

    def __init__(self, model, spec, resolved, device_type):
        self.kinds = island_modules(spec, resolved)
        self.calls = {n: 0 for n in self.kinds}
        modules = dict(model.named_modules())
        for name, kind in self.kinds.items():
            check(name in modules, f"fp32 islands: no module {name}")
            mod = modules[name]
            cast = FP32_ISLANDS[kind][0]
            orig = mod.forward

            def forward(*args, __orig=orig, __cast=cast, __name=name, **kwargs):
                self.calls[__name] += 1
                if __cast:
                    args = tuple(_as_f32(a) for a in args)
                    kwargs = {k: _as_f32(v) for k, v in kwargs.items()}
                with torch.autocast(device_type=device_type, enabled=False):
                    return __orig(*args, **kwargs)

            mod.forward = forward

    def counts(self):
        out = {}
        for name, kind in self.kinds.items():
            out[kind] = out.get(kind, 0) + 1
        return out

    def never_called(self):
        return sorted(n for n, c in self.calls.items() if c == 0)


# --------------------------------------------------------------------------------------------------
# Loss, gradients, routing
# --------------------------------------------------------------------------------------------------


def masked_nll_sum(logits, ids, mask):
    """Sum over t of mask[t+1] * -log softmax(logits[t])[ids[t+1]] for one row (batch dimension 1): the
    numerator of recipes-and-measurement.md §3. Only supervised positions go through the fp32 softmax
    (mask bits are 0 or 1, so this equals the masked sum)."""
    check(logits.shape[0] == 1 and ids.shape[0] == 1 and mask.shape[0] == 1, "masked_nll_sum takes one row")
    pos = torch.nonzero(mask[0, 1:], as_tuple=True)[0]
    lg = logits[0, :-1].index_select(0, pos).float()
    tgt = ids[0, 1:].index_select(0, pos)
    return F.cross_entropy(lg, tgt, reduction="sum")


def grad_parts(params, resolved, ckpt_name):
    return [params[n].grad for n in resolved[ckpt_name]]


def dump_gradients(path, spec, resolved, params, train_names, metadata=None):
    """Gradients (as they are in .grad: before clipping) of every trainable tensor, fp32, checkpoint names and
    layout (w13 rows interleaved again), written one tensor at a time."""
    by_name = {e["name"]: e for e in spec}
    entries = [(c, "F32", by_name[c]["shape"]) for c in train_names]
    w = SafetensorsWriter(path, entries, metadata=dict(metadata or {}, format="pt"))
    non_finite = []
    try:
        for c in train_names:
            e = by_name[c]
            parts = grad_parts(params, resolved, c)
            check(all(p is not None for p in parts), f"{c}: no gradient")
            if not all(bool(torch.isfinite(p).all()) for p in parts):
                non_finite.append(c)
            host = [p.detach().to(device="cpu", dtype=torch.float32) for p in parts]
            x = mg.to_ckpt(e["kind"], host).contiguous()
            check(tuple(x.shape) == tuple(e["shape"]), f"{c}: gradient shape {tuple(x.shape)} != {e['shape']}")
            w.write(c, x.numpy())
            del host, x
        w.close()
    except BaseException:
        w.abort()
        raise
    return non_finite


def _rel_l2(pairs):
    """sqrt(sum ||a - b||^2 / sum ||b||^2) over (a, b) pairs (b the reference); ||a|| when b is all zero."""
    num = den = an = 0.0
    for a, b in pairs:
        a, b = a.float(), b.float()
        num += float(torch.linalg.vector_norm(a - b)) ** 2
        den += float(torch.linalg.vector_norm(b)) ** 2
        an += float(torch.linalg.vector_norm(a)) ** 2
    if not (math.isfinite(num) and math.isfinite(den)):
        return float("nan")
    return math.sqrt(num / den) if den > 0 else math.sqrt(an)


def gradient_errors_vs_file(path, spec, resolved, params, train_names, device, reference="grad"):
    """Relative L2 error between the current .grad and a gradient file in checkpoint names and layout (written
    by dump_gradients or by quill's --dump-grads-step), layout independent: the file's tensor is mapped to
    transformers' layout. reference="grad": ||file - grad|| / ||grad|| (the file is the candidate);
    reference="file": ||grad - file|| / ||file||. Returns (errors by name, problems)."""
    by_name = {e["name"]: e for e in spec}
    rd = SafetensorsReader(path)
    out, problems = {}, []
    extra = sorted(set(rd.keys()) - set(train_names))
    if extra:
        problems.append(f"{path}: tensors that are not trainable here: {extra[:20]}")
    for c in train_names:
        if c not in rd.header:
            problems.append(f"{path}: {c} missing")
            out[c] = float("nan")
            continue
        if rd.shape(c) != tuple(by_name[c]["shape"]):
            problems.append(f"{path}: {c} has shape {rd.shape(c)}, expected {tuple(by_name[c]['shape'])}")
            out[c] = float("nan")
            continue
        f = torch.from_numpy(_writable_f32(rd, c)).to(device)
        grads = [g.detach() for g in grad_parts(params, resolved, c)]
        parts = mg.to_internal(by_name[c]["kind"], f)
        pairs = zip(parts, grads) if reference == "grad" else zip(grads, parts)
        out[c] = _rel_l2(pairs)
        del f, parts
    return out, problems


def gradient_errors_vs_saved(saved, params, resolved, train_names):
    """Relative L2 error of the current .grad against saved[name] (a list of tensors in transformers' layout,
    any device): ||grad - saved|| / ||saved||."""
    out = {}
    for c in train_names:
        grads = grad_parts(params, resolved, c)
        out[c] = _rel_l2((g.detach(), s.to(g.device)) for g, s in zip(grads, saved[c]))
    return out


def error_report(errs, problems=None, **extra):
    worst = sorted(errs.items(), key=lambda kv: (-kv[1] if math.isfinite(kv[1]) else -math.inf))
    return dict(extra, tensors=len(errs), max=worst[0][1] if worst else None, worst=worst[:10],
                problems=list(problems or []), per_tensor=errs)


class RouterMargins:
    """Forward hooks on every router: the fp32 selection scores (sigmoid of fp32 logits + bias), the gap between
    the k-th and (k+1)-th score per token, and the chosen experts. Armed only when wanted."""

    def __init__(self, model, tc, spec, resolved):
        self.E, self.k = tc["n_routed_experts"], tc["num_experts_per_tok"]
        self.armed = False
        self.stats = {}
        self.topk = {}
        self.handles = []
        modules = dict(model.named_modules())
        gates = [(e["name"][: -len(".weight")] + ".topk", _owner(resolved[e["name"]][0], ".weight"))
                 for e in spec if e["name"].endswith(".mlp.gate.weight")]
        n_sparse = sum(1 for t in tc["mlp_layer_types"] if t == "sparse")
        check(len(gates) == n_sparse, f"found {len(gates)} routers, expected {n_sparse}")
        for key, name in gates:
            check(name in modules, f"no router module {name}")
            mod = modules[name]
            check(hasattr(mod, "weight") and hasattr(mod, "e_score_correction_bias"),
                  f"router {name} lacks weight / e_score_correction_bias")
            hook = self._hook(key)
            try:
                handle = mod.register_forward_hook(hook, with_kwargs=True)
            except TypeError:  # torch < 2.0
                handle = mod.register_forward_hook(lambda m, a, o, __h=hook: __h(m, a, {}, o))
            self.handles.append(handle)

    def _hook(self, key):
        def hook(mod, args, kwargs, output):
            if not self.armed:
                return
            h = args[0] if args else kwargs["hidden_states"]
            dev_type = h.device.type
            with torch.no_grad(), torch.autocast(device_type=dev_type, enabled=False):
                flat = h.detach().reshape(-1, h.shape[-1]).float()
                s = torch.sigmoid(F.linear(flat, mod.weight.detach().float()))[:, : self.E]
                choice = s + mod.e_score_correction_bias.detach().float()
                top = torch.topk(choice, self.k + 1, dim=-1)
                margin = top.values[:, self.k - 1] - top.values[:, self.k]
                st = self.stats.setdefault(key, {"tokens": 0, "min_margin": float("inf"), "below_1e-3": 0,
                                                 "below_1e-4": 0, "below_1e-5": 0})
                st["tokens"] += int(margin.numel())
                st["min_margin"] = min(st["min_margin"], float(margin.min()))
                for thr, lab in ((1e-3, "below_1e-3"), (1e-4, "below_1e-4"), (1e-5, "below_1e-5")):
                    st[lab] += int((margin < thr).sum())
                sel = top.indices[:, : self.k].sort(dim=-1).values.to(torch.int32).cpu()
                self.topk.setdefault(key, []).append(sel)
        return hook

    def remove(self):
        for h in self.handles:
            h.remove()

    def write_topk(self, path):
        names = sorted(self.topk)
        arrays = {n: torch.cat(self.topk[n], dim=0).contiguous().numpy() for n in names}
        w = SafetensorsWriter(path, [(n, "I32", arrays[n].shape) for n in names],
                              metadata={"format": "pt", "content": "fp32 top-k choice per token (sorted expert ids), "
                                        "rows of the step in order, one row after another"})
        for n in names:
            w.write(n, arrays[n])
        w.close()
