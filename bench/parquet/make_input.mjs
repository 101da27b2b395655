// The Parquet data-build benchmark's input (bench/parquet/README.md): conversations from a JSONL
// file, cut to the shape of allenai/tulu-3-sft-mixture (id, messages [{role, content}], source),
// written as a JSONL twin and as Parquet by a second, independent writer: parquet-wasm (the Rust
// `parquet` crate of arrow-rs compiled to WebAssembly), snappy and zstd, dictionary pages, row
// groups of 1,000 rows (as Hugging Face `datasets` writes its Parquet).
//
//   cd WORK && npm install parquet-wasm@0.8.0 apache-arrow@21.2.0
//   node bench/parquet/make_input.mjs --npm WORK/node_modules --input conv.jsonl --copies 3 --out DIR
//
// Writes DIR/bench.jsonl, DIR/bench-snappy.parquet, DIR/bench-zstd.parquet (the same
// conversations in the same order: the input's, `copies` times).
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";

const args = Object.fromEntries(
  process.argv.slice(2).reduce((acc, a, i, all) => (a.startsWith("--") ? [...acc, [a.slice(2), all[i + 1]]] : acc), []));
for (const k of ["npm", "input", "out"]) if (!args[k]) throw new Error(`make_input.mjs: --${k} is required`);
const copies = Number(args.copies ?? 1);
const require = createRequire(path.join(path.resolve(args.npm), "x.js"));
const arrow = require("apache-arrow");
const parquet = require("parquet-wasm/node");

const lines = fs.readFileSync(args.input, "utf8").split("\n").filter((l) => l.trim() !== "");
const sources = ["bench/upper", "bench/math", "bench/cjk"];
const ids = [], msgs = [], srcs = [];
let jsonl = "";
for (let c = 0; c < copies; ++c) {
  lines.forEach((line, i) => {
    const messages = JSON.parse(line).messages.map((m) => ({ content: m.content ?? null, role: m.role }));
    const row = { id: `bench_${c}_${i}`, messages, source: sources[i % 3] };
    ids.push(row.id);
    msgs.push(messages);
    srcs.push(row.source);
    jsonl += JSON.stringify(row) + "\n";
  });
}
fs.mkdirSync(args.out, { recursive: true });
fs.writeFileSync(path.join(args.out, "bench.jsonl"), jsonl);

const { Field, List, Struct, Utf8, Table, vectorFromArray, tableToIPC } = arrow;
const messageType = new List(new Field("item", new Struct([new Field("content", new Utf8(), true),
                                                            new Field("role", new Utf8(), true)]), true));
const table = new Table({
  id: vectorFromArray(ids, new Utf8()),
  messages: vectorFromArray(msgs, messageType),
  source: vectorFromArray(srcs, new Utf8()),
});
for (const [name, codec] of [["snappy", parquet.Compression.SNAPPY], ["zstd", parquet.Compression.ZSTD]]) {
  const props = new parquet.WriterPropertiesBuilder()
    .setCompression(codec)
    .setDictionaryEnabled(true)
    .setMaxRowGroupSize(1000)
    .build();
  const bytes = parquet.writeParquet(parquet.Table.fromIPCStream(tableToIPC(table, "stream")), props);
  fs.writeFileSync(path.join(args.out, `bench-${name}.parquet`), bytes);
}
console.log(JSON.stringify({ conversations: ids.length, jsonl_bytes: Buffer.byteLength(jsonl) }));
