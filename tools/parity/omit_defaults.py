#!/usr/bin/env python3
"""Writes an Inkling config with every key that equals transformers' default left out.

transformers 5.17.0's `save_pretrained` wrote every Inkling key (tests/fixtures/hf/written/), so the
configs "with defaults omitted" that a person or another version may write are made here: a key is left
out when its value equals the default in tests/fixtures/hf/defaults/text_config.json (transformers'
`InklingTextConfig().to_dict()`), and `layer_types` / `mlp_layer_types` also when they equal what
transformers' `__post_init__` derives from the keys that remain (configuration_inkling.py). A
multimodal config is handled in its `text_config`. No torch or transformers needed.

    python3 tools/parity/omit_defaults.py --defaults tests/fixtures/hf/defaults/text_config.json \
        IN.json OUT.json
"""
import argparse
import json
import os

# transformers' attribute_map: a second spelling of a key.
ALIASES = {
    "sliding_window": "sliding_window_size",
    "sconv_kernel_size": "conv_kernel_size",
    "num_local_experts": "n_routed_experts",
    "embedding_multiplier": "logits_mup_width_multiplier",
    "model_max_length": "max_position_embeddings",
}


def derived_layer_types(text, layers):
    """InklingTextConfig.__post_init__: from local_layer_ids, else (i + 1) % 6 != 0 slides."""
    ids = text.get("local_layer_ids")
    local = set(ids) if ids is not None else {i for i in range(layers) if (i + 1) % 6}
    return ["hybrid_sliding" if i in local else "hybrid" for i in range(layers)]


def derived_mlp_layer_types(text, layers):
    """InklingTextConfig.__post_init__: layers below dense_mlp_idx (default 0) dense."""
    idx = text.get("dense_mlp_idx", 0)
    return ["dense" if i < idx else "sparse" for i in range(layers)]


def omit_defaults(text, defaults):
    out = {}
    for key, value in text.items():
        name = ALIASES.get(key, key)
        if name in ("layer_types", "mlp_layer_types"):
            out[key] = value  # decided below, once the other keys are known
        elif name not in defaults or defaults[name] != value or type(defaults[name]) is not type(value):
            out[key] = value
    layers = out.get("num_hidden_layers", defaults["num_hidden_layers"])
    if out.get("layer_types") == derived_layer_types(out, layers):
        del out["layer_types"]
    if out.get("mlp_layer_types") == derived_mlp_layer_types(out, layers):
        del out["mlp_layer_types"]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--defaults", required=True, help="transformers' InklingTextConfig().to_dict() as JSON")
    ap.add_argument("input")
    ap.add_argument("output")
    args = ap.parse_args()
    with open(args.defaults) as f:
        defaults = json.load(f)
    with open(args.input) as f:
        config = json.load(f)
    if "text_config" in config:
        config["text_config"] = omit_defaults(config["text_config"], defaults)
    else:
        config = omit_defaults(config, defaults)
    with open(args.output + ".tmp", "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(args.output + ".tmp", args.output)


if __name__ == "__main__":
    main()
