#!/usr/bin/env python3
"""Golden token ids from tiktoken's o200k_base, for tests/data/bpe_o200k_test.cc.

    make_golden_ids.py --ranks build/o200k_base.tiktoken --out-dir DIR FILE [FILE ...]

Each FILE is read as bytes and decoded as UTF-8 with errors="replace" (ill-formed bytes become
U+FFFD, what quill's encode does), then encoded with tiktoken's encode_ordinary. The encoding is
built from the local rank file (the GPU machine cannot download it) with tiktoken's own o200k_base
definition: tiktoken_ext.openai_public.o200k_base() is called with its rank loader pointed at the
file, so the pattern and special tokens are tiktoken's, not a copy. The rank file's SHA-256 must be
the one tiktoken expects.

Writes DIR/<basename of FILE>.o200k_ids per input:
    offset 0   8 bytes   magic "QTOKIDS1"
    offset 8   32 bytes  SHA-256 of the input file's bytes
    offset 40  u64 LE    number of ids
    offset 48            the ids, each as an unsigned LEB128 varint (1 to 3 bytes for o200k)
and prints one line per file (bytes, ids, tiktoken version).
"""

import argparse
import base64
import hashlib
import os
import struct
import sys

O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"


def load_encoding(ranks_path):
    import tiktoken
    import tiktoken_ext.openai_public as public

    data = open(ranks_path, "rb").read()
    digest = hashlib.sha256(data).hexdigest()
    if digest != O200K_SHA256:
        sys.exit(f"{ranks_path}: sha256 {digest}, but o200k_base.tiktoken is {O200K_SHA256}")
    ranks = {}
    for line in data.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    public.load_tiktoken_bpe = lambda *args, **kwargs: ranks  # o200k_base() reads its ranks through this name
    spec = public.o200k_base()
    return tiktoken.Encoding(name="o200k_base", pat_str=spec["pat_str"], mergeable_ranks=spec["mergeable_ranks"],
                             special_tokens=spec["special_tokens"]), tiktoken.__version__


def varints(ids):
    out = bytearray()
    for v in ids:
        while True:
            b = v & 0x7F
            v >>= 7
            if v:
                out.append(b | 0x80)
            else:
                out.append(b)
                break
    return bytes(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", required=True, help="o200k_base.tiktoken (scripts/fetch-o200k.sh)")
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()
    enc, version = load_encoding(args.ranks)
    os.makedirs(args.out_dir, exist_ok=True)
    for path in args.files:
        data = open(path, "rb").read()
        ids = enc.encode_ordinary(data.decode("utf-8", errors="replace"))
        out = os.path.join(args.out_dir, os.path.basename(path) + ".o200k_ids")
        with open(out, "wb") as f:
            f.write(b"QTOKIDS1" + hashlib.sha256(data).digest() + struct.pack("<Q", len(ids)) + varints(ids))
        print(f"{path}: {len(data)} bytes -> {len(ids)} ids -> {out} (tiktoken {version})")


if __name__ == "__main__":
    main()
