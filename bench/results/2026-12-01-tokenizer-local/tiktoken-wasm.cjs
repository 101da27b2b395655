// Local stand-in for tiktoken (npm tiktoken: tiktoken's Rust core compiled to WASM).
const { Tiktoken } = require("tiktoken/lite");
const fs = require("fs"), crypto = require("crypto");
const o200k = require("tiktoken/encoders/o200k_base.json");
const [,, ...files] = process.argv;
const enc = new Tiktoken(o200k.bpe_ranks, {}, o200k.pat_str);
for (const f of files) {
  const text = fs.readFileSync(f, "utf8");
  const bytes = Buffer.byteLength(text);
  const t0 = process.hrtime.bigint();
  const ids = enc.encode_ordinary ? enc.encode_ordinary(text) : enc.encode(text, [], []);
  const s = Number(process.hrtime.bigint() - t0) / 1e9;
  const h = crypto.createHash("sha256").update(Buffer.from(new Uint32Array(ids).buffer)).digest("hex");
  console.log(JSON.stringify({file: f, bytes, seconds: s, mb_per_s: bytes / 1e6 / s, tokens: ids.length, ids_sha256: h}));
}
