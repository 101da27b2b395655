#!/usr/bin/env python3
"""Parquet fixtures for quill's reader, written by pyarrow in the shape of allenai/tulu-3-sft-mixture
(columns id: string, messages: list<struct<content: string, role: string>>, source: string).

Usage:
    python3 tools/parquet/make_fixtures.py --input data/synthetic/conversations.jsonl --count 150 --out DIR

Writes in DIR the same conversations as:
  conversations.jsonl        one {"id", "messages", "source"} object a line (the JSONL twin)
  none-v1.parquet            no compression, dictionary pages, data page v1
  snappy-v1.parquet          snappy, dictionary pages, data page v1
  zstd-v2.parquet            zstd, dictionary pages, data page v2
  plain-snappy-v2.parquet    snappy, no dictionary (PLAIN byte arrays), data page v2
  part-0.parquet, part-1.parquet   the conversations split in two files (read in order)
  fixtures.json              versions and the settings of each file
Every file has row groups of 40 rows and 4 KiB data pages, so there are several of each.
"""

import argparse
import json
import os

import pyarrow as pa
import pyarrow.parquet as pq

EXTRA = [  # non-ASCII text, empty content, a long message: the byte arrays a reader must get right
    [{"role": "user", "content": "翻译成英文：今天天气很好。"}, {"role": "assistant", "content": "The weather is nice today."}],
    [{"role": "system", "content": ""}, {"role": "user", "content": "Say ✓ and é."}, {"role": "assistant", "content": "✓ é"}],
    [{"role": "user", "content": "repeat: " + "abc " * 700}, {"role": "assistant", "content": "abc " * 700}],
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--input", required=True)
    ap.add_argument("--count", type=int, default=150)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    convs = []
    with open(args.input) as f:
        for line in f:
            if len(convs) >= args.count:
                break
            msgs = [{"role": m["role"], "content": m["content"]} for m in json.loads(line)["messages"]]
            convs.append(msgs)
    convs[10:10] = EXTRA
    sources = ["ai2-adapt-dev/synthetic_upper", "ai2-adapt-dev/synthetic_math", "ai2-adapt-dev/synthetic_cjk"]
    rows = [{"id": f"quill_fixture_{i}", "messages": m, "source": sources[i % 3]} for i, m in enumerate(convs)]
    with open(f"{args.out}/conversations.jsonl", "w") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n")
    msg_type = pa.list_(pa.struct([("content", pa.string()), ("role", pa.string())]))
    schema = pa.schema([("id", pa.string()), ("messages", msg_type), ("source", pa.string())])

    def table(part):
        return pa.Table.from_pylist(part, schema=schema)

    settings = {
        "none-v1.parquet": dict(compression="none", use_dictionary=True, data_page_version="1.0"),
        "snappy-v1.parquet": dict(compression="snappy", use_dictionary=True, data_page_version="1.0"),
        "zstd-v2.parquet": dict(compression="zstd", use_dictionary=True, data_page_version="2.0"),
        "plain-snappy-v2.parquet": dict(compression="snappy", use_dictionary=False, data_page_version="2.0"),
    }
    for name, s in settings.items():
        pq.write_table(table(rows), f"{args.out}/{name}", row_group_size=40, data_page_size=4096, **s)
    half = len(rows) // 2
    for i, part in enumerate([rows[:half], rows[half:]]):
        pq.write_table(table(part), f"{args.out}/part-{i}.parquet", row_group_size=40, data_page_size=4096,
                       compression="snappy")
    meta = {"pyarrow": pa.__version__, "conversations": len(rows), "files": settings,
            "parts": {"part-0.parquet": half, "part-1.parquet": len(rows) - half}}
    for name in list(settings) + ["part-0.parquet", "part-1.parquet"]:
        md = pq.ParquetFile(f"{args.out}/{name}").metadata
        meta.setdefault("row_groups", {})[name] = md.num_row_groups
    with open(f"{args.out}/fixtures.json", "w") as f:
        json.dump(meta, f, indent=1)
    print(json.dumps(meta))


if __name__ == "__main__":
    main()
