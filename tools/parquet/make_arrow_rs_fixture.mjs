// A second writer's fixtures for quill's Parquet reader: the 153 conversations of
// tests/data/fixtures/parquet/conversations.jsonl written by parquet-wasm (the Rust `parquet`
// crate of arrow-rs, compiled to WebAssembly) instead of pyarrow, with what pyarrow's fixtures
// lack: a dictionary that overflows its 1 KiB page limit, so that the column chunk goes on in
// pages of the fallback encoding; data pages v2 of at most 1 KiB, zstd, row groups of 50 rows.
// The fallback is PLAIN (--fallback plain, which quill reads) or arrow-rs's own default for
// version-2 files, DELTA_BYTE_ARRAY (--fallback default, which quill refuses by name).
//
//   cd WORK && npm install parquet-wasm@0.8.0 apache-arrow@21.2.0
//   node tools/parquet/make_arrow_rs_fixture.mjs --npm WORK/node_modules \
//       --input tests/data/fixtures/parquet/conversations.jsonl --fallback plain \
//       --out tests/data/fixtures/parquet/arrow-rs-zstd-v2-fallback.parquet
//   node tools/parquet/make_arrow_rs_fixture.mjs ... --fallback default --out .../arrow-rs-zstd-v2-delta.parquet
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";

const args = Object.fromEntries(
  process.argv.slice(2).reduce((acc, a, i, all) => (a.startsWith("--") ? [...acc, [a.slice(2), all[i + 1]]] : acc), []));
for (const k of ["npm", "input", "out"]) if (!args[k]) throw new Error(`make_arrow_rs_fixture.mjs: --${k} is required`);
const require = createRequire(path.join(path.resolve(args.npm), "x.js"));
const { Field, List, Struct, Utf8, Table, vectorFromArray, tableToIPC } = require("apache-arrow");
const parquet = require("parquet-wasm/node");

const rows = fs.readFileSync(args.input, "utf8").split("\n").filter((l) => l.trim() !== "").map((l) => JSON.parse(l));
const messageType = new List(new Field("item", new Struct([new Field("content", new Utf8(), true),
                                                            new Field("role", new Utf8(), true)]), true));
const table = new Table({
  id: vectorFromArray(rows.map((r) => r.id), new Utf8()),
  messages: vectorFromArray(rows.map((r) => r.messages.map((m) => ({ content: m.content, role: m.role }))), messageType),
  source: vectorFromArray(rows.map((r) => r.source), new Utf8()),
});
let builder = new parquet.WriterPropertiesBuilder();
if ((args.fallback ?? "plain") === "plain") builder = builder.setEncoding(parquet.Encoding.PLAIN);
const props = builder
  .setCompression(parquet.Compression.ZSTD)
  .setDictionaryEnabled(true)
  .setDictionaryPageSizeLimit(1024)
  .setDataPageSizeLimit(1024)
  .setWriteBatchSize(16)
  .setMaxRowGroupSize(50)
  .setWriterVersion(parquet.WriterVersion.V2)
  .setCreatedBy("parquet-wasm 0.8.0 (tools/parquet/make_arrow_rs_fixture.mjs)")
  .build();
fs.writeFileSync(args.out, parquet.writeParquet(parquet.Table.fromIPCStream(tableToIPC(table, "stream")), props));
console.log(JSON.stringify({ rows: rows.length, bytes: fs.statSync(args.out).size }));
