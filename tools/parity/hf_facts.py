#!/usr/bin/env python3
"""Facts from Hugging Face transformers' Inkling that quill's tests pin down (run on the GPU machine).

Usage:
    python3 tools/parity/hf_facts.py --out DIR

Writes, in DIR:
  versions.json                    torch / transformers / pyarrow versions
  defaults/text_config.json        InklingTextConfig().to_dict(): the default of every text-config key
  defaults/mm_config.json          InklingConfig().to_dict() (the multimodal wrapper, default towers)
  written/<name>.json              each configs/<name>.json loaded by InklingTextConfig and written back by
                                   save_pretrained (keys equal to their defaults omitted, as transformers writes)
  written/<name>.params.json       parameter count of InklingForCausalLM built from that written config
  names/<name>.transformers.json   [name, shape, dtype] of every tensor InklingForCausalLM.save_pretrained writes
  names/<name>.release.json        the same for the release form (make_init.py's checkpoint, which
                                   InklingForConditionalGeneration.from_pretrained loads), plus what that class
                                   reports missing / unexpected when loading it
  source/                          transformers' Inkling sources (configuration, modeling, conversion), for
                                   reading where defaults and names come from
"""

import argparse
import inspect
import json
import os
import shutil
import subprocess
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors import safe_open  # noqa: E402
from transformers.models.inkling import configuration_inkling as cfg_mod  # noqa: E402
from transformers.models.inkling import modeling_inkling as mdl_mod  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def dump(path, obj):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=True, default=str)
        f.write("\n")


def tensor_names(directory):
    out = []
    for fn in sorted(os.listdir(directory)):
        if not fn.endswith(".safetensors"):
            continue
        with safe_open(os.path.join(directory, fn), "pt") as f:
            for k in f.keys():
                sl = f.get_slice(k)
                out.append([k, list(sl.get_shape()), str(sl.get_dtype())])
    return sorted(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--configs", nargs="*", default=["configs/tiny.json", "configs/slice.json"])
    args = ap.parse_args()
    out = args.out
    os.makedirs(out, exist_ok=True)
    versions = {"torch": torch.__version__, "transformers": transformers.__version__}
    try:
        import pyarrow
        versions["pyarrow"] = pyarrow.__version__
    except ImportError:
        versions["pyarrow"] = None
    dump(f"{out}/versions.json", versions)

    src = os.path.dirname(inspect.getfile(cfg_mod))
    shutil.copytree(src, f"{out}/source/inkling", ignore=shutil.ignore_patterns("__pycache__"))
    conv = os.path.join(os.path.dirname(inspect.getfile(transformers)), "conversion_mapping.py")
    if os.path.exists(conv):
        shutil.copy(conv, f"{out}/source/conversion_mapping.py")

    dump(f"{out}/defaults/text_config.json", cfg_mod.InklingTextConfig().to_dict())
    dump(f"{out}/defaults/mm_config.json", cfg_mod.InklingConfig().to_dict())

    for path in args.configs:
        name = os.path.splitext(os.path.basename(path))[0]
        with open(path) as f:
            raw = json.load(f)
        raw.pop("torch_dtype", None)
        tc = cfg_mod.InklingTextConfig(**{k: v for k, v in raw.items() if k not in ("architectures", "model_type")})
        with tempfile.TemporaryDirectory() as d:
            tc.save_pretrained(d)
            with open(f"{d}/config.json") as f:
                written = json.load(f)
        dump(f"{out}/written/{name}.json", written)
        tc2 = cfg_mod.InklingTextConfig.from_dict(written)
        torch.manual_seed(0)
        with torch.device("meta"):
            model = mdl_mod.InklingForCausalLM(tc2)
        n = sum(p.numel() for p in model.parameters())
        dump(f"{out}/written/{name}.params.json", {"parameters": n, "config": path})
        if name != "tiny":
            continue
        # Names of the transformers form: what save_pretrained writes for a text model.
        model = mdl_mod.InklingForCausalLM(tc2)
        with tempfile.TemporaryDirectory() as d:
            model.save_pretrained(d)
            dump(f"{out}/names/{name}.transformers.json", tensor_names(d))
        # Names of the release form: make_init's checkpoint, and what InklingForConditionalGeneration says of it.
        with tempfile.TemporaryDirectory() as d:
            subprocess.run([sys.executable, f"{HERE}/make_init.py", "--config", path, "--seed", "1", "--out", d,
                            "--draw-device", "cpu"], check=True, stdout=subprocess.DEVNULL)
            names = tensor_names(d)
            with open(f"{d}/config.json") as f:
                mm = json.load(f)
            model, info = mdl_mod.InklingForConditionalGeneration.from_pretrained(d, output_loading_info=True)
            report = {k: sorted(v) if isinstance(v, (list, set)) else str(v) for k, v in info.items()}
            dump(f"{out}/names/{name}.release.json", {"tensors": names, "config": mm, "loading_info": report})
    print("hf_facts: done")


if __name__ == "__main__":
    main()
