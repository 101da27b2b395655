#!/usr/bin/env python3
"""Initial weights for the GPU parity runs, in the release's checkpoint format.

Usage:
    python3 tools/parity/make_init.py --config configs/slice.json --seed 1234 --out /tmp/parity/init [--fp32]

Writes, in --out:
  config.json        the multimodal InklingConfig (model_type inkling_mm_model) around the transformers-schema
                     text config of --config, with make_golden's tiny vision/audio towers: the directory loads with
                     InklingForConditionalGeneration.from_pretrained (transformers' own checkpoint conversion)
                     and with quill (`quill train --init DIR`).
  model.safetensors  every text tensor under its release name and layout (model.llm.*, w13 rows interleaved:
                     even rows gate, odd rows up), drawn "like a real model" (inkling_ref.INIT_SCHEME), in the
                     release's dtypes: BF16, except mlp.gate.bias and mlp.gate.global_scale in F32 (all F32 with
                     --fp32). Written one tensor at a time.
  init.json          what was written: seed, scheme, dtypes, tensor count, bytes, sha256 (files up to 2 GiB,
                     or with --sha256), versions, command.
The draws come from one torch generator on --draw-device (default: cuda when available, else cpu); the same
seed and device give the same file.
"""

import argparse
import json
import os
import shlex
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import inkling_ref as ref  # noqa: E402
from inkling_ref import check, mg, torch  # noqa: E402
from parity_io import SafetensorsWriter, read_safetensors_header  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", required=True, help="transformers-schema Inkling text config (JSON)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--out", required=True)
    ap.add_argument("--fp32", action="store_true", help="every tensor F32 (default: the release's dtypes)")
    ap.add_argument("--draw-device", default=None, help="cuda or cpu (default: cuda when available)")
    ap.add_argument("--sha256", action="store_true", help="hash model.safetensors whatever its size")
    args = ap.parse_args()
    ref.set_tool("MAKE_INIT")
    command = "python3 " + " ".join(shlex.quote(a) for a in sys.argv)
    t0 = time.time()
    device = args.draw_device or ("cuda" if torch.cuda.is_available() else "cpu")
    print(f"torch {torch.__version__}, transformers {ref.transformers.__version__}; drawing on {device}")

    text, notes = mg.load_text_config_dict(args.config)
    tc = dict(text)
    check(tc["unpadded_vocab_size"] <= tc["vocab_size"], "unpadded_vocab_size > vocab_size")
    mm_cfg = ref.build_mm_config(text)

    out = args.out
    os.makedirs(out, exist_ok=True)
    for fn in ("model.safetensors", "model.safetensors.index.json", "config.json", "init.json"):
        p = os.path.join(out, fn)
        if os.path.exists(p):
            os.remove(p)
    mm_cfg.save_pretrained(out)
    check(os.path.exists(os.path.join(out, "config.json")), "config.json was not written")

    spec = mg.ckpt_spec(tc)
    dtypes = {e["name"]: ref.checkpoint_dtype(e["name"], args.fp32) for e in spec}
    n_values = sum(int(torch.Size(e["shape"]).numel()) for e in spec)
    n_bytes = sum(int(torch.Size(e["shape"]).numel()) * (4 if dtypes[e["name"]] == "F32" else 2) for e in spec)
    do_hash = args.sha256 or n_bytes <= (2 << 30)
    print(f"{len(spec)} tensors, {n_values:,} values, {n_bytes / 2**30:.2f} GiB of data")

    path = os.path.join(out, "model.safetensors")
    writer = SafetensorsWriter(path, [(e["name"], dtypes[e["name"]], e["shape"]) for e in spec],
                               metadata={"format": "pt"}, hash=do_hash)
    gen = torch.Generator(device=device).manual_seed(args.seed)
    stats = {}
    try:
        for e in spec:
            t = ref.init_tensor(e["init"], e["shape"], gen, device)
            arr = ref.tensor_bytes_for(t, dtypes[e["name"]])
            stats.setdefault(e["init"], []).append(float(t.float().std()) if t.numel() > 1 else float(t.float()[0]))
            writer.write(e["name"], arr)
            del t, arr
        digest = writer.close()
    except BaseException:
        writer.abort()
        raise

    header, meta, _ = read_safetensors_header(path)
    check(set(header) == {e["name"] for e in spec}, "model.safetensors key set differs from the map")
    for e in spec:
        h = header[e["name"]]
        check(tuple(h["shape"]) == tuple(e["shape"]) and h["dtype"] == dtypes[e["name"]],
              f"{e['name']}: wrote {h['dtype']} {h['shape']}")
    size = os.path.getsize(path)

    info = {
        "format": "quill-parity-init",
        "config": os.path.abspath(args.config),
        "text_config": text,
        "seed": args.seed,
        "draw_device": device,
        "init_scheme": ref.INIT_SCHEME,
        "dtypes": "all F32" if args.fp32 else "release: BF16, F32 for mlp.gate.bias and mlp.gate.global_scale",
        "tensors": len(spec),
        "values": n_values,
        "model_safetensors_bytes": size,
        "model_safetensors_sha256": digest,
        "std_by_init": {k: [min(v), max(v)] for k, v in stats.items()},
        "notes": notes,
        "transformers_version": ref.transformers.__version__,
        "torch_version": torch.__version__,
        "command": command,
        "seconds": round(time.time() - t0, 1),
    }
    with open(os.path.join(out, "init.json"), "w") as f:
        json.dump(info, f, indent=1)
        f.write("\n")
    print(f"wrote {out}/model.safetensors ({size / 2**30:.2f} GiB, sha256 {digest or 'not computed'}) and "
          f"config.json in {time.time() - t0:.1f} s")
    print("std (min, max) by init kind: " + ", ".join(f"{k} {v[0]:.4f}..{v[1]:.4f}" for k, v in
                                                      info["std_by_init"].items()))
    print("OK")


if __name__ == "__main__":
    main()
