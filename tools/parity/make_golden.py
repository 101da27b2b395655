#!/usr/bin/env python3
"""Golden parity fixtures for quill from Hugging Face transformers' Inkling (fp32, CPU).

Usage:
    python3 tools/parity/make_golden.py --config configs/tiny.json --out tests/fixtures/golden/tiny

What it does (see tools/parity/README.md for the file formats):
  1. Builds an Inkling multimodal config (model_type "inkling_mm_model") whose text_config is the
     transformers-schema text config read from --config, plus tiny vision/audio towers.
  2. Draws every text tensor with a seeded generator, in checkpoint (release) names and layout
     (model.llm.*, interleaved w13 rows), and writes model.safetensors (all F32) + config.json.
  3. Reloads that directory with InklingForConditionalGeneration.from_pretrained, so transformers' own
     checkpoint conversion (renames, w13 de-interleave) is exercised; asserts no missing/unexpected keys
     (except the vision/audio towers, which are not in the checkpoint) and that every loaded text weight
     equals the drawn one under the explicit name/layout map below.
  4. Copies the loaded language model + lm_head into a fresh InklingForCausalLM (the reference text
     model) and runs: forward on R rows (each its own sequence), the masked per-token loss, backward, and
     3 AdamW steps with global-norm clipping.
  5. Writes rows.json, golden.safetensors (logits, grad.<ckpt name>, step3.<ckpt name>) and golden.json.

Everything is float32 on CPU (no TF32, single thread), eager attention, eager experts.
Any inconsistency is a hard failure (AssertionError / SystemExit with a message).
"""

import argparse
import copy
import json
import math
import os
import random
import shlex
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

import transformers  # noqa: E402
from transformers.models.inkling import configuration_inkling as cfg_mod  # noqa: E402
from transformers.models.inkling import modeling_inkling as mdl_mod  # noqa: E402

# --------------------------------------------------------------------------------------------------
# Fixed settings
# --------------------------------------------------------------------------------------------------

OPT = {
    "type": "torch.optim.AdamW",
    "lr": 1e-3,
    "betas": [0.9, 0.95],
    "eps": 1e-8,
    "weight_decay": 0.1,
    "steps": 3,
    "clip_grad_norm": 1.0,
}

# Keys the text config must carry (transformers InklingTextConfig schema); no defaults are trusted.
REQUIRED_TEXT_KEYS = [
    "vocab_size", "unpadded_vocab_size", "hidden_size", "num_hidden_layers",
    "num_attention_heads", "num_key_value_heads", "head_dim",
    "swa_num_attention_heads", "swa_num_key_value_heads", "swa_head_dim",
    "d_rel", "sliding_window_size", "rel_extent", "log_scaling_n_floor", "log_scaling_alpha",
    "layer_types", "mlp_layer_types", "rms_norm_eps", "intermediate_size", "moe_intermediate_size",
    "n_routed_experts", "num_experts_per_tok", "n_shared_experts", "route_scale",
    "logits_mup_width_multiplier",
]
RELEASE_SCHEMA_KEYS = ["dense_intermediate_size", "dense_mlp_idx", "local_layer_ids"]
DROP_TEXT_KEYS = {"model_type", "architectures", "transformers_version", "_name_or_path",
                  "torch_dtype", "dtype", "auto_map", "_attn_implementation", "attn_implementation"}

# Tiny towers: they are built by InklingForConditionalGeneration but are not in the checkpoint.
# patch 2 / temporal 2 / 3 layers keeps plan_out_scales on its argmin path (no scipy) and tiny.
VISION_CONFIG = {"patch_size": 2, "temporal_patch_size": 2, "num_channels": 3, "num_hidden_layers": 3}
AUDIO_CONFIG = {"n_mel_bins": 2, "mel_vocab_size": 4}
TOWER_PREFIXES = ("model.vision_tower.", "model.audio_tower.")

FROZEN_PATTERNS = [
    "model.llm.layers.*.attn.rel_logits_proj.proj",
    "model.llm.layers.*.mlp.global_scale",
    "model.llm.layers.*.mlp.gate.global_scale",
]
BUFFER_PATTERNS = ["model.llm.layers.*.mlp.gate.bias  (e_score_correction_bias: selection only, never trained)"]

MAX_OUTPUT_BYTES = 8 * 1024 * 1024


def fail(msg):
    print("\n" + "=" * 100, file=sys.stderr)
    print("MAKE_GOLDEN FAILED: " + msg, file=sys.stderr)
    print("=" * 100, file=sys.stderr)
    raise SystemExit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


# --------------------------------------------------------------------------------------------------
# Config
# --------------------------------------------------------------------------------------------------


def load_text_config_dict(path):
    with open(path) as f:
        raw = json.load(f)
    text = raw["text_config"] if "text_config" in raw else raw
    check(isinstance(text, dict), f"{path}: text config is not an object")
    rel = [k for k in RELEASE_SCHEMA_KEYS if k in text]
    check(not rel, f"{path}: release-schema keys {rel} present; this script needs the transformers "
                   f"InklingTextConfig schema (layer_types, mlp_layer_types, intermediate_size = dense width, "
                   f"moe_intermediate_size = expert width)")
    missing = [k for k in REQUIRED_TEXT_KEYS if k not in text]
    check(not missing, f"{path}: missing required text-config keys {missing} (no defaults are used)")
    check("conv_kernel_size" in text or "sconv_kernel_size" in text,
          f"{path}: needs conv_kernel_size (or sconv_kernel_size)")
    text = {k: v for k, v in text.items() if k not in DROP_TEXT_KEYS}
    if "sconv_kernel_size" in text and "conv_kernel_size" not in text:
        text["conv_kernel_size"] = text.pop("sconv_kernel_size")
    notes = []
    if text.get("pad_token_id") is not None:
        notes.append(f"pad_token_id {text['pad_token_id']} overridden to null (an embedding padding_idx "
                     f"would zero that row's gradient)")
        print("WARNING: " + notes[-1])
    text["pad_token_id"] = None
    if text.get("hidden_act", "silu") != "silu":
        fail(f"hidden_act must be silu, got {text['hidden_act']}")
    L = text["num_hidden_layers"]
    check(len(text["layer_types"]) == L and len(text["mlp_layer_types"]) == L,
          "layer_types / mlp_layer_types length != num_hidden_layers")
    check(set(text["layer_types"]) <= {"hybrid", "hybrid_sliding"}, f"bad layer_types {text['layer_types']}")
    check(set(text["mlp_layer_types"]) <= {"dense", "sparse"}, f"bad mlp_layer_types {text['mlp_layer_types']}")
    return text, notes


def verify_text_config(tc, text, where):
    """Every key we passed must read back unchanged from the built config object."""
    for k, v in text.items():
        if k in ("pad_token_id",):
            continue
        got = getattr(tc, k, "<absent>")
        if isinstance(v, float) or isinstance(got, float):
            ok = isinstance(got, (int, float)) and math.isclose(float(got), float(v), rel_tol=0, abs_tol=0)
        else:
            ok = got == v
        check(ok, f"{where}: text config key {k!r}: wrote {v!r}, config object has {got!r}")
    check(getattr(tc, "pad_token_id", None) is None, f"{where}: pad_token_id is not null")
    check(getattr(tc, "hidden_act", "silu") == "silu", f"{where}: hidden_act != silu")


# --------------------------------------------------------------------------------------------------
# Checkpoint layout <-> transformers' internal layout (explicit map)
# --------------------------------------------------------------------------------------------------
# kinds:
#   copy         internal tensor == checkpoint tensor
#   w13_dense    ckpt [2F, D], rows interleaved (even = gate, odd = up) -> gate_proj.weight [F, D], up_proj.weight [F, D]
#   w13_experts  ckpt [E, 2F, D] interleaved on dim 1 -> gate_up_proj [E, 2F, D] with gate = rows [0, F), up = rows [F, 2F)
#   w13_shared   ckpt [S, 2F, D] interleaved on dim 1 -> gate_proj [S, F, D], up_proj [S, F, D]
# roles: train | frozen | buffer


def ckpt_spec(tc):
    """Ordered list of checkpoint tensors: dict(name, shape, init, kind, internal (text-model-relative or
    absolute 'lm_head.weight'), role). The embed_norm internal name is resolved later."""
    D, V, L = tc["hidden_size"], tc["vocab_size"], tc["num_hidden_layers"]
    K = tc["conv_kernel_size"]
    spec = []

    def add(name, shape, init, internal, kind="copy", role="train"):
        spec.append(dict(name=name, shape=tuple(int(s) for s in shape), init=init, internal=internal,
                         kind=kind, role=role))

    add("model.llm.embed.weight", (V, D), "embed", ["embed_tokens.weight"])
    add("model.llm.embed_norm.weight", (D,), "norm", ["<EMBED_NORM>"])
    add("model.llm.norm.weight", (D,), "norm", ["norm.weight"])
    add("model.llm.unembed.weight", (V, D), "unembed", ["lm_head.weight"])
    for i in range(L):
        sliding = tc["layer_types"][i] == "hybrid_sliding"
        H = tc["swa_num_attention_heads"] if sliding else tc["num_attention_heads"]
        G = tc["swa_num_key_value_heads"] if sliding else tc["num_key_value_heads"]
        hd = tc["swa_head_dim"] if sliding else tc["head_dim"]
        ext = tc["sliding_window_size"] if sliding else tc["rel_extent"]
        p, q = f"model.llm.layers.{i}.", f"layers.{i}."
        add(p + "attn_norm.weight", (D,), "norm", [q + "input_layernorm.weight"])
        add(p + "mlp_norm.weight", (D,), "norm", [q + "post_attention_layernorm.weight"])
        add(p + "attn.wq_du.weight", (H * hd, D), "linear", [q + "self_attn.q_proj.weight"])
        add(p + "attn.wk_dv.weight", (G * hd, D), "linear", [q + "self_attn.k_proj.weight"])
        add(p + "attn.wv_dv.weight", (G * hd, D), "linear", [q + "self_attn.v_proj.weight"])
        add(p + "attn.wr_du.weight", (H * tc["d_rel"], D), "linear", [q + "self_attn.r_proj.weight"])
        add(p + "attn.wo_ud.weight", (D, H * hd), "linear", [q + "self_attn.o_proj.weight"])
        add(p + "attn.q_norm.weight", (hd,), "norm", [q + "self_attn.q_norm.weight"])
        add(p + "attn.k_norm.weight", (hd,), "norm", [q + "self_attn.k_norm.weight"])
        add(p + "attn.rel_logits_proj.proj", (tc["d_rel"], ext), "rel", [q + "self_attn.rel_logits_proj.proj"],
            role="frozen")
        add(p + "attn.k_sconv.weight", (G * hd, 1, K), "sconv", [q + "self_attn.k_sconv.conv1d.weight"])
        add(p + "attn.v_sconv.weight", (G * hd, 1, K), "sconv", [q + "self_attn.v_sconv.conv1d.weight"])
        add(p + "attn_sconv.weight", (D, 1, K), "sconv", [q + "attn_sconv.conv1d.weight"])
        add(p + "mlp_sconv.weight", (D, 1, K), "sconv", [q + "mlp_sconv.conv1d.weight"])
        if tc["mlp_layer_types"][i] == "dense":
            Fd = tc["intermediate_size"]
            add(p + "mlp.w13_dn.weight", (2 * Fd, D), "linear",
                [q + "mlp.gate_proj.weight", q + "mlp.up_proj.weight"], kind="w13_dense")
            add(p + "mlp.w2_md.weight", (D, Fd), "linear", [q + "mlp.down_proj.weight"])
            add(p + "mlp.global_scale", (1,), "scale", [q + "mlp.global_scale"], role="frozen")
        else:
            E, S, Fe = tc["n_routed_experts"], tc["n_shared_experts"], tc["moe_intermediate_size"]
            add(p + "mlp.gate.weight", (E + S, D), "linear", [q + "mlp.gate.weight"])
            add(p + "mlp.gate.bias", (E,), "router_bias", [q + "mlp.gate.e_score_correction_bias"], role="buffer")
            add(p + "mlp.gate.global_scale", (1,), "scale", [q + "mlp.gate.global_scale"], role="frozen")
            add(p + "mlp.experts.w13_weight", (E, 2 * Fe, D), "linear", [q + "mlp.experts.gate_up_proj"],
                kind="w13_experts")
            add(p + "mlp.experts.w2_weight", (E, D, Fe), "linear", [q + "mlp.experts.down_proj"])
            add(p + "mlp.shared_experts.shared_w13_weight", (S, 2 * Fe, D), "linear",
                [q + "mlp.shared_experts.gate_proj", q + "mlp.shared_experts.up_proj"], kind="w13_shared")
            add(p + "mlp.shared_experts.shared_w2_weight", (S, D, Fe), "linear", [q + "mlp.shared_experts.down_proj"])
    names = [e["name"] for e in spec]
    assert len(names) == len(set(names))
    return spec


def to_internal(kind, c):
    """checkpoint tensor -> list of internal tensors (same order as entry['internal'])."""
    if kind == "copy":
        return [c]
    if kind == "w13_dense":
        return [c[0::2], c[1::2]]
    if kind == "w13_experts":
        return [torch.cat([c[:, 0::2], c[:, 1::2]], dim=1)]
    if kind == "w13_shared":
        return [c[:, 0::2], c[:, 1::2]]
    raise ValueError(kind)


def to_ckpt(kind, parts):
    """list of internal tensors -> checkpoint-layout tensor (inverse of to_internal)."""
    if kind == "copy":
        (x,) = parts
        return x.clone()
    if kind == "w13_dense":
        g, u = parts
        assert g.shape == u.shape and g.ndim == 2
        out = torch.empty((2 * g.shape[0], g.shape[1]), dtype=g.dtype)
        out[0::2] = g
        out[1::2] = u
        return out
    if kind == "w13_experts":
        (x,) = parts
        assert x.ndim == 3 and x.shape[1] % 2 == 0
        f = x.shape[1] // 2
        out = torch.empty_like(x)
        out[:, 0::2] = x[:, :f]
        out[:, 1::2] = x[:, f:]
        return out
    if kind == "w13_shared":
        g, u = parts
        assert g.shape == u.shape and g.ndim == 3
        out = torch.empty((g.shape[0], 2 * g.shape[1], g.shape[2]), dtype=g.dtype)
        out[:, 0::2] = g
        out[:, 1::2] = u
        return out
    raise ValueError(kind)


def draw_weights(spec, tc, seed):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    D = tc["hidden_size"]
    out = {}
    for e in spec:
        shape, init = e["shape"], e["init"]
        z = torch.randn(shape, generator=gen, dtype=torch.float32)
        if init == "embed":
            t = z
        elif init == "unembed":
            t = z * (2.0 / math.sqrt(D))
        elif init in ("norm", "scale"):
            t = 1.0 + 0.1 * z
        elif init == "linear":
            t = z / math.sqrt(shape[-1])  # fan_in is the last dim for every matrix / expert bank
        elif init == "sconv":
            t = 0.2 * z
        elif init == "rel":
            t = 0.5 * z
        elif init == "router_bias":
            t = 0.05 * z
        else:
            raise ValueError(init)
        out[e["name"]] = t.to(torch.float32).contiguous()
    # self-test of the layout helpers
    for e in spec:
        c = out[e["name"]]
        back = to_ckpt(e["kind"], [x.contiguous() for x in to_internal(e["kind"], c)])
        assert torch.equal(back, c), f"layout round trip failed for {e['name']}"
    return out


# --------------------------------------------------------------------------------------------------
# Model helpers
# --------------------------------------------------------------------------------------------------


def resolve_internal(spec, text_sd_keys, prefix):
    """Full internal names per checkpoint entry for a model whose InklingTextModel sits under `prefix`
    (lm_head.weight is at the model root in both InklingForConditionalGeneration and InklingForCausalLM)."""
    if "embed_tokens.embed_norm.weight" in text_sd_keys:
        embed_norm = "embed_tokens.embed_norm.weight"  # transformers < 5.18 (InklingNormedEmbedding)
    elif "embed_norm.weight" in text_sd_keys:
        embed_norm = "embed_norm.weight"  # later layout
    else:
        fail("cannot find the embedding RMSNorm weight in the text model; state_dict keys:\n  "
             + "\n  ".join(sorted(text_sd_keys)))
    res = {}
    for e in spec:
        full = []
        for n in e["internal"]:
            if n == "lm_head.weight":
                full.append(n)
            else:
                full.append(prefix + (embed_norm if n == "<EMBED_NORM>" else n))
        res[e["name"]] = full
    return res, embed_norm


def check_coverage(spec, resolved, model, text_model, prefix, where):
    """The map must cover every state_dict entry of the text model + lm_head exactly once."""
    mapped = [n for e in spec for n in resolved[e["name"]]]
    dup = sorted({n for n in mapped if mapped.count(n) > 1})
    check(not dup, f"{where}: internal names mapped twice: {dup}")
    want = {prefix + k for k in text_model.state_dict().keys()} | {"lm_head.weight"}
    got = set(mapped)
    check(got == want, f"{where}: name map does not match the model.\n  in model, not mapped: "
                       f"{sorted(want - got)}\n  mapped, not in model: {sorted(got - want)}")
    params = dict(model.named_parameters())
    buffers = dict(model.named_buffers())
    for e in spec:
        for n in resolved[e["name"]]:
            if e["role"] == "buffer":
                check(n in buffers and n not in params, f"{where}: {n} expected to be a buffer")
            else:
                check(n in params, f"{where}: {n} expected to be a parameter")


def get_tensor(model, name):
    params = dict(model.named_parameters())
    if name in params:
        return params[name]
    buffers = dict(model.named_buffers())
    check(name in buffers, f"no parameter/buffer named {name}")
    return buffers[name]


def check_weights_equal(spec, resolved, model, weights, where):
    for e in spec:
        expect = to_internal(e["kind"], weights[e["name"]])
        for n, x in zip(resolved[e["name"]], expect):
            t = get_tensor(model, n).detach()
            check(t.dtype == torch.float32, f"{where}: {n} dtype {t.dtype}, expected float32")
            check(tuple(t.shape) == tuple(x.shape),
                  f"{where}: {n} shape {tuple(t.shape)} != expected {tuple(x.shape)} (from {e['name']})")
            if not torch.equal(t, x):
                d = (t - x).abs().max().item()
                fail(f"{where}: {n} differs from the drawn checkpoint tensor {e['name']} (kind {e['kind']}), "
                     f"max abs diff {d:.3e}. The checkpoint name map or w13 interleave assumed here does not "
                     f"match transformers' conversion.")


def set_eager(model, where):
    for fn, val in (("set_attn_implementation", "eager"), ("set_experts_implementation", "eager")):
        if hasattr(model, fn):
            getattr(model, fn)(val)
    cfgs = [model.config]
    if hasattr(model.config, "get_text_config"):
        cfgs.append(model.config.get_text_config())
    for c in cfgs:
        attn = getattr(c, "_attn_implementation", None)
        check(attn == "eager", f"{where}: attention implementation is {attn!r}, need 'eager' "
                               f"(the relative position bias is consumed only by eager attention)")
        exp = getattr(c, "_experts_implementation", "eager")
        check(exp in (None, "eager"), f"{where}: experts implementation is {exp!r}, need 'eager'")


def loading_report(info):
    """Hard problems: missing text keys, unexpected keys, mismatched shapes, errors. Other non-empty
    categories of the loading info (if a transformers version adds any) are printed as warnings."""
    check(isinstance(info, dict), f"output_loading_info did not return a dict: {type(info)}")
    bad = []
    allowed_missing = 0
    for key, val in info.items():
        items = list(val) if val is not None and not isinstance(val, (str, bytes)) else ([val] if val else [])
        if key == "missing_keys":
            other = sorted(str(k) for k in items if not str(k).startswith(TOWER_PREFIXES))
            allowed_missing = len(items) - len(other)
            if other:
                bad.append(f"missing_keys (text model / lm_head): {other}")
        elif not items:
            continue
        elif any(w in key for w in ("unexpected", "mismatch", "error", "missing")):
            bad.append(f"{key}: {sorted(str(k) for k in items)}")
        else:
            print(f"WARNING: loading info {key}: {sorted(str(k) for k in items)}")
    check("missing_keys" in info and "unexpected_keys" in info,
          f"loading info lacks missing_keys/unexpected_keys (keys: {sorted(info)})")
    return bad, allowed_missing


# --------------------------------------------------------------------------------------------------
# Data and loss
# --------------------------------------------------------------------------------------------------


def make_rows(n_rows, T, vocab, seed):
    rng = random.Random(seed)
    rows = []
    for _ in range(n_rows):
        tokens = [rng.randrange(vocab) for _ in range(T)]
        mask = [0] * T
        t, on = 1, rng.random() < 0.5  # position 0 always 0
        while t < T:
            span = rng.randint(2, 7) if on else rng.randint(1, 4)
            for j in range(t, min(T, t + span)):
                mask[j] = 1 if on else 0
            t += span
            on = not on
        rows.append({"tokens": tokens, "mask": mask})
    return rows


def masked_loss(logits, ids, mask):
    """Sum over targets of -log p(token[t+1]) * mask[t+1], divided by the sum of mask[t+1] (whole batch)."""
    logp = torch.log_softmax(logits[:, :-1, :].float(), dim=-1)
    tgt = ids[:, 1:]
    w = mask[:, 1:].to(torch.float32)
    nll = -logp.gather(-1, tgt.unsqueeze(-1)).squeeze(-1)
    return (nll * w).sum() / w.sum()


# --------------------------------------------------------------------------------------------------
# Router margin monitor (top-k selection is the only discontinuity in the model)
# --------------------------------------------------------------------------------------------------


class RouterMonitor:
    def __init__(self, model, tc):
        self.E, self.k = tc["n_routed_experts"], tc["num_experts_per_tok"]
        self.min_margin = float("inf")
        self.bias_flips = 0
        self.selections = 0
        self.usage = {}
        self.handles = []
        gates = [(n, m) for n, m in model.named_modules() if n.endswith(".mlp.gate")]
        n_sparse = sum(1 for t in tc["mlp_layer_types"] if t == "sparse")
        check(len(gates) == n_sparse, f"found {len(gates)} routers (*.mlp.gate), expected {n_sparse}")
        for name, mod in gates:
            check(hasattr(mod, "weight") and hasattr(mod, "e_score_correction_bias"),
                  f"router {name} lacks weight / e_score_correction_bias")
            self.handles.append(mod.register_forward_hook(self._hook(name), with_kwargs=True))

    def _hook(self, name):
        def hook(mod, args, kwargs, output):
            h = args[0] if args else kwargs["hidden_states"]
            with torch.no_grad():
                flat = h.detach().reshape(-1, h.shape[-1]).float()
                s = torch.sigmoid(F.linear(flat, mod.weight.detach().float()))[:, : self.E]
                choice = s + mod.e_score_correction_bias.detach().float()
                top = torch.topk(choice, self.k + 1, dim=-1)
                margin = (top.values[:, self.k - 1] - top.values[:, self.k]).min().item()
                self.min_margin = min(self.min_margin, margin)
                sel = top.indices[:, : self.k].sort(dim=-1).values
                nobias = torch.topk(s, self.k, dim=-1).indices.sort(dim=-1).values
                self.bias_flips += int((sel != nobias).any(dim=-1).sum().item())
                self.selections += sel.shape[0]
                u = self.usage.setdefault(name, torch.zeros(self.E, dtype=torch.long))
                u += torch.bincount(sel.reshape(-1), minlength=self.E)
        return hook

    def remove(self):
        for h in self.handles:
            h.remove()


# --------------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------------


def file_size(p):
    return os.path.getsize(p)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", required=True, help="transformers-schema Inkling text config (JSON)")
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--seed", type=int, default=1234, help="weight seed")
    ap.add_argument("--data-seed", type=int, default=4321, help="first seed tried for the rows")
    ap.add_argument("--rows", type=int, default=2)
    ap.add_argument("--row-tokens", type=int, default=32)
    ap.add_argument("--min-router-margin", type=float, default=2e-5,
                    help="smallest allowed gap between the k-th and (k+1)-th routing score in any forward")
    ap.add_argument("--max-attempts", type=int, default=20, help="row seeds tried to satisfy the margin")
    args = ap.parse_args()
    command = "python3 " + " ".join(shlex.quote(a) for a in sys.argv)

    torch.set_num_threads(1)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    torch.set_default_dtype(torch.float32)

    print(f"torch {torch.__version__}, transformers {transformers.__version__}, python {sys.version.split()[0]}")
    print(f"modeling file: {mdl_mod.__file__}")

    # ---- 1. config ---------------------------------------------------------------------------
    text, notes = load_text_config_dict(args.config)
    tc = dict(text)  # plain values for shapes
    V, U, D = tc["vocab_size"], tc["unpadded_vocab_size"], tc["hidden_size"]
    check(U <= V, "unpadded_vocab_size > vocab_size")
    mm_cfg = cfg_mod.InklingConfig(text_config=dict(text), vision_config=dict(VISION_CONFIG),
                                   audio_config=dict(AUDIO_CONFIG))
    mm_cfg.architectures = ["InklingForConditionalGeneration"]
    check(mm_cfg.model_type == "inkling_mm_model", f"InklingConfig.model_type is {mm_cfg.model_type}")
    verify_text_config(mm_cfg.text_config, text, "built InklingConfig")

    out = args.out
    os.makedirs(out, exist_ok=True)
    for fn in ("model.safetensors", "model.safetensors.index.json", "config.json", "rows.json",
               "golden.safetensors", "golden.json"):
        p = os.path.join(out, fn)
        if os.path.exists(p):
            os.remove(p)
    mm_cfg.save_pretrained(out)
    check(os.path.exists(os.path.join(out, "config.json")), "config.json was not written")

    # ---- 2. weights in checkpoint layout ------------------------------------------------------
    spec = ckpt_spec(tc)
    weights = draw_weights(spec, tc, args.seed)
    save_file({k: v for k, v in weights.items()}, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    with safe_open(os.path.join(out, "model.safetensors"), framework="pt") as f:
        keys = set(f.keys())
        check(keys == set(weights), "model.safetensors key set differs from the drawn set")
        for k in keys:
            check(f.get_tensor(k).dtype == torch.float32, f"{k} is not F32 in model.safetensors")
    n_params = sum(v.numel() for v in weights.values())
    print(f"wrote {len(weights)} checkpoint tensors ({n_params} values) to {out}/model.safetensors")

    # ---- 3. reload through transformers -------------------------------------------------------
    load_kwargs = dict(dtype=torch.float32, attn_implementation="eager", output_loading_info=True)
    try:
        mm, info = mdl_mod.InklingForConditionalGeneration.from_pretrained(
            out, experts_implementation="eager", **load_kwargs)
    except TypeError as ex:
        print(f"note: from_pretrained rejected experts_implementation ({ex}); retrying without it")
        mm, info = mdl_mod.InklingForConditionalGeneration.from_pretrained(out, **load_kwargs)
    bad, n_tower_missing = loading_report(info)
    check(not bad, "loading the release-named checkpoint reported problems:\n  " + "\n  ".join(bad))
    print(f"loaded InklingForConditionalGeneration: no unexpected keys, no missing text keys "
          f"({n_tower_missing} vision/audio tower keys not in the checkpoint, as intended)")
    check(mm.config.model_type == "inkling_mm_model", "reloaded config is not inkling_mm_model")
    verify_text_config(mm.config.text_config, text, "reloaded config.json")
    set_eager(mm, "InklingForConditionalGeneration")
    mm.eval()
    text_model = mm.model.language_model
    check(isinstance(text_model, mdl_mod.InklingTextModel), "mm.model.language_model is not InklingTextModel")
    mm_resolved, embed_norm_name = resolve_internal(spec, set(text_model.state_dict().keys()), "model.language_model.")
    check_coverage(spec, mm_resolved, mm, text_model, "model.language_model.", "InklingForConditionalGeneration")
    check_weights_equal(spec, mm_resolved, mm, weights, "InklingForConditionalGeneration after from_pretrained")
    check(mm.lm_head.weight.data_ptr() != text_model.embed_tokens.weight.data_ptr(), "lm_head tied to embed")
    print("every loaded text weight equals the drawn checkpoint tensor under the explicit map "
          "(w13 de-interleave: gate = even rows, up = odd rows)")

    # ---- 4-6. rows, forward/backward, AdamW ---------------------------------------------------
    text_cfg = copy.deepcopy(mm.config.text_config)
    frozen_ckpt = [e["name"] for e in spec if e["role"] == "frozen"]
    buffer_ckpt = [e["name"] for e in spec if e["role"] == "buffer"]
    train_ckpt = [e["name"] for e in spec if e["role"] == "train"]
    by_name = {e["name"]: e for e in spec}

    result = None
    for attempt in range(args.max_attempts):
        data_seed = args.data_seed + attempt
        rows = make_rows(args.rows, args.row_tokens, U, data_seed)
        ids = torch.tensor([r["tokens"] for r in rows], dtype=torch.long)
        mask = torch.tensor([r["mask"] for r in rows], dtype=torch.long)
        n_sup = int(mask[:, 1:].sum().item())
        check(n_sup > 0 and all(sum(r["mask"][1:]) > 0 for r in rows), "a row has no supervised target")

        causal = mdl_mod.InklingForCausalLM(copy.deepcopy(text_cfg))
        causal.to(torch.float32)
        set_eager(causal, "InklingForCausalLM")
        missing, unexpected = causal.model.load_state_dict(text_model.state_dict(), strict=True)
        causal.lm_head.weight.data.copy_(mm.lm_head.weight.data)
        cz_resolved, _ = resolve_internal(spec, set(causal.model.state_dict().keys()), "model.")
        check_coverage(spec, cz_resolved, causal, causal.model, "model.", "InklingForCausalLM")
        check_weights_equal(spec, cz_resolved, causal, weights, "InklingForCausalLM after copy")

        params = dict(causal.named_parameters())
        frozen_internal = {n for c in frozen_ckpt for n in cz_resolved[c]}
        for n, p in params.items():
            p.requires_grad_(n not in frozen_internal)
        trainable = [(n, p) for n, p in params.items() if p.requires_grad]
        train_internal = {n for c in train_ckpt for n in cz_resolved[c]}
        check({n for n, _ in trainable} == train_internal,
              "trainable parameter set != mapped trainable checkpoint tensors")
        for c in train_ckpt:  # weight-decay rule is layout independent
            nd = len(by_name[c]["shape"])
            check(all(params[n].ndim == nd for n in cz_resolved[c]), f"ndim differs between layouts for {c}")
        decay = [p for _, p in trainable if p.ndim >= 2]
        no_decay = [p for _, p in trainable if p.ndim < 2]
        opt = torch.optim.AdamW(
            [{"params": decay, "weight_decay": OPT["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}],
            lr=OPT["lr"], betas=tuple(OPT["betas"]), eps=OPT["eps"], foreach=False)

        monitor = RouterMonitor(causal, tc)
        causal.train()
        losses, norms, clipped = [], [], []
        logits0, grads = None, {}
        for step in range(OPT["steps"]):
            opt.zero_grad(set_to_none=True)
            logits = causal(input_ids=ids, use_cache=False).logits
            check(tuple(logits.shape) == (args.rows, args.row_tokens, U),
                  f"logits shape {tuple(logits.shape)}, expected {(args.rows, args.row_tokens, U)}")
            check(logits.dtype == torch.float32, "logits are not float32")
            loss = masked_loss(logits, ids, mask)
            check(torch.isfinite(loss).item(), f"non-finite loss at step {step}")
            loss.backward()
            for n, p in params.items():
                if n in frozen_internal:
                    check(p.grad is None, f"frozen parameter {n} received a gradient")
                else:
                    check(p.grad is not None, f"trainable parameter {n} has no gradient")
            if step == 0:
                logits0 = logits.detach().clone()
                for c in train_ckpt:
                    grads[c] = to_ckpt(by_name[c]["kind"], [params[n].grad.detach().clone() for n in cz_resolved[c]])
            norm = torch.nn.utils.clip_grad_norm_([p for _, p in trainable], OPT["clip_grad_norm"])
            check(torch.isfinite(norm).item(), f"non-finite grad norm at step {step}")
            losses.append(loss.item())
            norms.append(norm.item())
            clipped.append(norm.item() > OPT["clip_grad_norm"])
            opt.step()
        with torch.no_grad():
            loss_after = masked_loss(causal(input_ids=ids, use_cache=False).logits, ids, mask).item()
        monitor.remove()

        if monitor.min_margin < args.min_router_margin:
            print(f"attempt {attempt}: row seed {data_seed}: smallest top-k routing margin "
                  f"{monitor.min_margin:.3e} < {args.min_router_margin:.1e}; trying the next row seed")
            continue
        result = dict(data_seed=data_seed, rows=rows, ids=ids, mask=mask, n_sup=n_sup, causal=causal,
                      resolved=cz_resolved, losses=losses, norms=norms, clipped=clipped, logits0=logits0,
                      grads=grads, loss_after=loss_after, monitor=monitor)
        break
    check(result is not None, f"no row seed in [{args.data_seed}, {args.data_seed + args.max_attempts}) gives "
                              f"a routing margin >= {args.min_router_margin}; try another --seed")

    causal, cz_resolved, monitor = result["causal"], result["resolved"], result["monitor"]
    ids, mask = result["ids"], result["mask"]

    # final weights in checkpoint layout; frozen tensors and buffers must be untouched
    step3 = {}
    for e in spec:
        step3[e["name"]] = to_ckpt(e["kind"], [get_tensor(causal, n).detach().clone() for n in cz_resolved[e["name"]]])
    for c in frozen_ckpt + buffer_ckpt:
        check(torch.equal(step3[c], weights[c]), f"{c} changed during training but is frozen / a buffer")
    n_changed = sum(0 if torch.equal(step3[c], weights[c]) else 1 for c in train_ckpt)
    check(n_changed == len(train_ckpt), f"only {n_changed}/{len(train_ckpt)} trainable tensors changed")
    check(abs(result["losses"][0] - masked_loss(result["logits0"], ids, mask).item()) <= 1e-6 * abs(result["losses"][0]),
          "step-0 loss is not the loss of the recorded logits")

    # cross-check against the multimodal class' own text forward at the initial weights. In transformers 5.17
    # InklingModel.forward applies language_model.embed_norm and then InklingTextModel.forward applies it again
    # (the norm sits outside its `if inputs_embeds is None`), so that path normalizes the embedding twice.
    # The golden follows InklingForCausalLM (one embed_norm, as sglang and miles). A difference is accepted
    # only when it is exactly that double norm; anything else fails.
    scale = result["logits0"].abs().max().item()
    tol = 1e-5 * max(1.0, scale)
    with torch.no_grad():
        mm_logits = mm(input_ids=ids, use_cache=False).logits
    check(tuple(mm_logits.shape) == tuple(result["logits0"].shape), "InklingForConditionalGeneration logits shape")
    mm_diff = (mm_logits - result["logits0"]).abs().max().item()
    if mm_diff <= tol:
        mm_check = f"InklingForConditionalGeneration logits equal InklingForCausalLM's (max abs diff {mm_diff:.3e})"
    else:
        tm = mm.model.language_model
        with torch.no_grad():
            emb = F.embedding(ids, tm.embed_tokens.weight)
            emb = tm.get_submodule(embed_norm_name[: -len(".weight")])(emb)  # one norm here, one in the text model
            h = tm(inputs_embeds=emb, use_cache=False).last_hidden_state
            dbl = mm.lm_head(h / text_cfg.logits_mup_width_multiplier)[..., :U]
        dbl_diff = (mm_logits - dbl).abs().max().item()
        check(dbl_diff <= tol, f"InklingForConditionalGeneration and InklingForCausalLM logits differ by "
                               f"{mm_diff:.3e}, and not by a double embed_norm (residual {dbl_diff:.3e})")
        mm_check = (f"InklingForConditionalGeneration logits differ from InklingForCausalLM's by {mm_diff:.3e}; "
                    f"explained exactly (residual {dbl_diff:.3e}) by its double embed_norm (InklingModel.forward "
                    f"and InklingTextModel.forward both apply it). Golden = InklingForCausalLM (single embed_norm).")
        print("WARNING: " + mm_check)

    # ---- 7. write outputs ---------------------------------------------------------------------
    with open(os.path.join(out, "rows.json"), "w") as f:
        json.dump({"row_tokens": args.row_tokens, "rows": result["rows"]}, f)
        f.write("\n")

    golden = {"logits": result["logits0"].contiguous()}
    for c in train_ckpt:
        golden["grad." + c] = result["grads"][c].contiguous()
    for e in spec:
        golden["step3." + e["name"]] = step3[e["name"]].contiguous()
    for k, v in golden.items():
        check(v.dtype == torch.float32 and torch.isfinite(v).all().item(), f"{k}: not finite F32")
    save_file(golden, os.path.join(out, "golden.safetensors"), metadata={"format": "pt"})

    usage = {n: u.tolist() for n, u in monitor.usage.items()}
    meta = {
        "loss": result["losses"][0],
        "losses": result["losses"],
        "grad_norms": result["norms"],
        "clipped": result["clipped"],
        "loss_after_step3": result["loss_after"],
        "optimizer": {
            **OPT,
            "weight_decay_rule": "weight_decay on tensors with ndim >= 2 (checkpoint layout: every matrix, "
                                 "the 3-D expert banks and the [C,1,K] short-conv weights); 0 on 1-D tensors",
            "update": "torch.optim.AdamW(foreach=False), per step t=1,2,3: p *= 1 - lr*wd; m = b1*m + (1-b1)*g; "
                      "v = b2*v + (1-b2)*g^2; p -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)",
            "clip": "torch.nn.utils.clip_grad_norm_(trainable, 1.0) before each step: total = L2 norm over all "
                    "trainable grads (reported in grad_norms, before clipping); g *= min(1, 1.0 / (total + 1e-6))",
            "lr_schedule": "constant",
            "same_batch_every_step": True,
        },
        "frozen": FROZEN_PATTERNS,
        "buffers": BUFFER_PATTERNS,
        "trainable_tensors": len(train_ckpt),
        "loss_definition": "sum over rows r and t in [0, T-1) of mask[r][t+1] * -log_softmax(logits[r][t])"
                           "[tokens[r][t+1]] / sum of mask[r][t+1]; softmax over the unpadded vocabulary",
        "rows": args.rows,
        "row_tokens": args.row_tokens,
        "supervised_targets": result["n_sup"],
        "unpadded_vocab_size": U,
        "seeds": {"weights": args.seed, "rows": result["data_seed"]},
        "router": {
            "min_topk_margin": monitor.min_margin if math.isfinite(monitor.min_margin) else None,
            "min_margin_required": args.min_router_margin,
            "selections_changed_by_bias": monitor.bias_flips,
            "selections": monitor.selections,
            "expert_usage_all_forwards": usage,
        },
        "golden_tensors": {
            "logits": "[R, T, unpadded_vocab] float32, step-0 forward",
            "grad.<checkpoint name>": "step-0 gradient (before clipping) of every trainable tensor, checkpoint layout",
            "step3.<checkpoint name>": "every checkpoint tensor after 3 AdamW steps, checkpoint layout "
                                       "(frozen tensors and gate.bias unchanged)",
        },
        "loading": {
            "class": "InklingForConditionalGeneration.from_pretrained (model_type inkling_mm_model: transformers' "
                     "checkpoint conversion renames model.llm.* and de-interleaves w13)",
            "reference_model": "InklingForCausalLM, state copied from the loaded model.language_model and lm_head",
            "attn_implementation": "eager",
            "experts_implementation": "eager",
            "tower_keys_not_in_checkpoint": n_tower_missing,
            "embed_norm_internal_name": embed_norm_name,
            "mm_vs_causal_logits_max_abs_diff": mm_diff,
            "mm_forward_check": mm_check,
            "name_map": {e["name"]: {"internal": cz_resolved[e["name"]], "kind": e["kind"], "role": e["role"]}
                         for e in spec},
        },
        "device": "cpu, float32, 1 thread",
        "notes": notes,
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "python_version": sys.version.split()[0],
        "command": command,
    }
    with open(os.path.join(out, "golden.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")

    # ---- 8. summary ---------------------------------------------------------------------------
    files = ["config.json", "model.safetensors", "rows.json", "golden.safetensors", "golden.json"]
    sizes = {fn: file_size(os.path.join(out, fn)) for fn in files}
    total = sum(sizes.values())
    print("\n---- summary ----")
    print(f"row seed {result['data_seed']}, supervised targets {result['n_sup']} of {args.rows * (args.row_tokens - 1)}")
    print("losses      " + ", ".join(f"{x:.6f}" for x in result["losses"]) + f"   (after step 3: {result['loss_after']:.6f})")
    print("grad norms  " + ", ".join(f"{x:.6f}" for x in result["norms"]) + f"   (clipped: {result['clipped']})")
    print(f"logits: mean {result['logits0'].mean().item():.4f}, std {result['logits0'].std().item():.4f}, "
          f"max |x| {scale:.4f}")
    print(f"router: min top-k margin {monitor.min_margin:.3e}; bias changed {monitor.bias_flips}/"
          f"{monitor.selections} selections; usage per layer {usage}")
    print(f"mm forward check: {mm_check}")
    print(f"golden.safetensors: {len(golden)} tensors (1 logits, {len(train_ckpt)} grads, {len(spec)} step3)")
    for fn in files:
        print(f"  {fn:20s} {sizes[fn]:>10d} bytes")
    print(f"  {'total':20s} {total:>10d} bytes")
    check(total < MAX_OUTPUT_BYTES, f"outputs total {total} bytes >= {MAX_OUTPUT_BYTES}")
    print("OK")


if __name__ == "__main__":
    main()
