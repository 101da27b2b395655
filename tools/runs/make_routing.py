#!/usr/bin/env python3
"""Write a routing file for quill's --replay-routing (src/train/trainer.cc routing_of_row): per MoE layer i,
model.llm.layers.{i}.mlp.gate.topk, int32 [rows * tokens, top_k], every token's top_k distinct experts drawn at
random (seeded). Two runs that replay the same file route every token alike, so what remains between them is
their arithmetic (issue 17: expert parallelism against one process on the GPU, routing flips taken out).

Usage: make_routing.py --config CONFIG.json --rows R --tokens T --out FILE [--seed S]
Plain Python; writes the safetensors container by hand (8-byte header length, JSON header, raw data)."""
import argparse
import json
import struct

import array
import os
import random


def moe_layers(cfg):
    kinds = cfg.get("mlp_layer_types")
    if kinds is None:
        raise SystemExit(f"make_routing: {cfg['_path']}: no mlp_layer_types")
    return [i for i, k in enumerate(kinds) if k == "sparse"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--rows", type=int, required=True)
    ap.add_argument("--tokens", type=int, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    cfg = json.load(open(a.config))
    cfg["_path"] = a.config
    experts, top_k = cfg["n_routed_experts"], cfg["num_experts_per_tok"]
    rng = random.Random(a.seed)
    n = a.rows * a.tokens
    header, blobs, offset = {}, [], 0
    for i in moe_layers(cfg):
        topk = array.array("i")  # int32, little-endian on every machine quill runs on
        for _ in range(n):
            topk.extend(rng.sample(range(experts), top_k))
        blob = topk.tobytes()
        header[f"model.llm.layers.{i}.mlp.gate.topk"] = {
            "dtype": "I32", "shape": [n, top_k], "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(a.out + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)
    os.replace(a.out + ".tmp", a.out)
    print(f"{a.out}: {len(blobs)} MoE layers, {n} tokens x top {top_k} of {experts}")


if __name__ == "__main__":
    main()
