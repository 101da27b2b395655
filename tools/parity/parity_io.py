"""Plain-Python pieces of the parity tools (no torch, no transformers; numpy only where arrays are read).

- RowsDir: quill's rows directory (docs/rows-format.md), memory-mapped with numpy.
- SafetensorsWriter: writes a safetensors file tensor by tensor (the header first, from shapes and dtypes
  known in advance), so a multi-GB checkpoint never sits in memory twice.
- read_safetensors_header / SafetensorsReader: numpy views of a safetensors file (F32, BF16, F16, ints).
- megatron_lr: the learning rate of step k (recipes-and-measurement.md §3).
- read_metrics / convergence_check: metrics.jsonl curves and the §4 convergence check, the same rules as
  quill's src/recipe/convergence.cc.
"""

import hashlib
import json
import math
import os
import struct

# --------------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------------


class ParityError(Exception):
    pass


def need(cond, msg):
    if not cond:
        raise ParityError(msg)


# --------------------------------------------------------------------------------------------------
# Rows (docs/rows-format.md, version 1)
# --------------------------------------------------------------------------------------------------

ROWS_MAGIC = b"QUILLROW"
ROWS_HEADER_BYTES = 64


class RowsDir:
    """rows.bin + manifest.json. tokens[r] is a uint32 array of T ids, mask[r] a uint8 array of T bits."""

    def __init__(self, path):
        import numpy as np

        self.path = path
        bin_path = os.path.join(path, "rows.bin")
        man_path = os.path.join(path, "manifest.json")
        need(os.path.isfile(bin_path), f"{bin_path}: missing")
        need(os.path.isfile(man_path), f"{man_path}: missing")
        with open(man_path) as f:
            try:
                self.manifest = json.load(f)
            except json.JSONDecodeError as ex:
                raise ParityError(f"{man_path}: malformed JSON ({ex})")
        size = os.path.getsize(bin_path)
        need(size >= ROWS_HEADER_BYTES, f"{bin_path}: {size} bytes, shorter than the 64-byte header")
        with open(bin_path, "rb") as f:
            head = f.read(ROWS_HEADER_BYTES)
        need(head[:8] == ROWS_MAGIC, f"{bin_path}: magic {head[:8]!r}, expected {ROWS_MAGIC!r}")
        version, T = struct.unpack_from("<II", head, 8)
        (R,) = struct.unpack_from("<Q", head, 16)
        need(version == 1, f"{bin_path}: version {version}, this reader knows 1")
        need(T > 0, f"{bin_path}: row_tokens is 0")
        need(head[24:64] == bytes(40), f"{bin_path}: reserved header bytes are not zero")
        need(size == ROWS_HEADER_BYTES + 5 * R * T,
             f"{bin_path}: {size} bytes, expected 64 + 5*R*T = {ROWS_HEADER_BYTES + 5 * R * T} (R={R}, T={T})")
        for key, val in (("rows", R), ("row_tokens", T), ("padding_tokens", 0)):
            need(self.manifest.get(key) == val, f"{man_path}: {key} = {self.manifest.get(key)!r}, rows.bin says {val}")
        need(R > 0, f"{bin_path}: no rows")
        self.rows, self.row_tokens = int(R), int(T)
        self.tokens = np.memmap(bin_path, dtype="<u4", mode="r", offset=ROWS_HEADER_BYTES, shape=(R, T))
        self.mask = np.memmap(bin_path, dtype=np.uint8, mode="r", offset=ROWS_HEADER_BYTES + 4 * R * T, shape=(R, T))
        # supervised targets of a row: t in 1..T-1 with mask[t] = 1
        self.supervised = np.asarray(self.mask[:, 1:].sum(axis=1, dtype=np.int64))
        bad = int((self.mask > 1).sum())
        need(bad == 0, f"{bin_path}: {bad} mask bytes are neither 0 nor 1")
        self.max_token_id = int(self.tokens.max())
        if "max_token_id" in self.manifest:
            need(self.manifest["max_token_id"] == self.max_token_id,
                 f"{man_path}: max_token_id {self.manifest['max_token_id']}, the rows hold {self.max_token_id}")

    def rows_for_step(self, step, global_batch):
        """quill's order (src/train/trainer.cc rows_for_step): consecutive rows, wrapping over the file."""
        return [(step * global_batch + i) % self.rows for i in range(global_batch)]

    def rows_sha256(self):
        h = hashlib.sha256()
        for r in range(self.rows):
            h.update(self.tokens[r].astype("<u4").tobytes())
            h.update(self.mask[r].tobytes())
        return h.hexdigest()


# --------------------------------------------------------------------------------------------------
# safetensors
# --------------------------------------------------------------------------------------------------

DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1,
               "U16": 2, "U32": 4, "U64": 8}
NUMPY_DTYPE = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "<u2", "I64": "<i8", "I32": "<i4", "I16": "<i2",
               "I8": "i1", "U8": "u1", "BOOL": "u1", "U16": "<u2", "U32": "<u4", "U64": "<u8"}


def _numel(shape):
    n = 1
    for s in shape:
        n *= int(s)
    return n


class SafetensorsWriter:
    """Streaming safetensors writer. Declare every tensor (name, dtype, shape) up front, then call
    write(name, data) in the declared order with a bytes-like object of exactly the declared size
    (little-endian). The file is written to PATH.tmp-<pid> and renamed on close(); sha256 of the whole
    file is kept when hash=True."""

    def __init__(self, path, entries, metadata=None, hash=False):
        self.path = path
        self.tmp = f"{path}.tmp-{os.getpid()}"
        self.entries = [(n, d, tuple(int(s) for s in shp)) for n, d, shp in entries]
        names = [n for n, _, _ in self.entries]
        need(len(names) == len(set(names)), f"{path}: duplicate tensor names")
        header = {}
        if metadata is not None:
            header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
        off = 0
        self.sizes = {}
        for n, d, shp in self.entries:
            need(d in DTYPE_BYTES, f"{path}: tensor {n}: unsupported dtype {d}")
            nb = _numel(shp) * DTYPE_BYTES[d]
            header[n] = {"dtype": d, "shape": list(shp), "data_offsets": [off, off + nb]}
            self.sizes[n] = nb
            off += nb
        self.total_data = off
        text = json.dumps(header, separators=(",", ":")).encode("utf-8")
        text += b" " * ((8 - len(text) % 8) % 8)
        self.hasher = hashlib.sha256() if hash else None
        self.f = open(self.tmp, "wb")
        self._put(struct.pack("<Q", len(text)))
        self._put(text)
        self.next = 0
        self.closed = False

    def _put(self, b):
        self.f.write(b)
        if self.hasher is not None:
            self.hasher.update(b)

    def write(self, name, data):
        need(self.next < len(self.entries), f"{self.path}: more tensors written than declared")
        want = self.entries[self.next][0]
        need(name == want, f"{self.path}: wrote {name}, expected {want} (declared order)")
        mv = memoryview(data).cast("B")
        need(mv.nbytes == self.sizes[name], f"{self.path}: tensor {name}: {mv.nbytes} bytes, declared {self.sizes[name]}")
        self._put(mv)
        self.next += 1

    def close(self):
        need(self.next == len(self.entries), f"{self.path}: {self.next} of {len(self.entries)} tensors written")
        self.f.flush()
        os.fsync(self.f.fileno())
        self.f.close()
        os.replace(self.tmp, self.path)
        self.closed = True
        return self.hasher.hexdigest() if self.hasher is not None else None

    def abort(self):
        if not self.closed:
            try:
                self.f.close()
            finally:
                if os.path.exists(self.tmp):
                    os.remove(self.tmp)


def read_safetensors_header(path):
    """(header dict without __metadata__, metadata, data offset)"""
    size = os.path.getsize(path)
    need(size >= 8, f"{path}: too short for a safetensors file")
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        need(n <= 100_000_000 and 8 + n <= size, f"{path}: bad header length {n}")
        header = json.loads(f.read(n).decode("utf-8"))
    meta = header.pop("__metadata__", None) or {}
    end = 0
    for name, e in header.items():
        need(e["dtype"] in DTYPE_BYTES, f"{path}: tensor {name}: unsupported dtype {e['dtype']}")
        b, t = e["data_offsets"]
        need(t - b == _numel(e["shape"]) * DTYPE_BYTES[e["dtype"]], f"{path}: tensor {name}: size mismatch")
        end = max(end, t)
    need(8 + n + end <= size, f"{path}: truncated (data ends at {8 + n + end}, file has {size} bytes)")
    return header, meta, 8 + n


class SafetensorsReader:
    """numpy access to a safetensors file: raw(name) is a read-only memmap in the stored dtype (BF16 as
    uint16), f32_chunks(name, elems) yields flat float32 chunks (BF16/F16/F32/F64 converted)."""

    def __init__(self, path):
        self.path = path
        self.header, self.metadata, self.data_offset = read_safetensors_header(path)

    def keys(self):
        return list(self.header.keys())

    def shape(self, name):
        return tuple(self.header[name]["shape"])

    def dtype(self, name):
        return self.header[name]["dtype"]

    def raw(self, name):
        import numpy as np

        e = self.header[name]
        shape = tuple(e["shape"])
        n = _numel(shape)
        if n == 0:
            return np.zeros(shape, dtype=NUMPY_DTYPE[e["dtype"]])
        return np.memmap(self.path, dtype=NUMPY_DTYPE[e["dtype"]], mode="r",
                         offset=self.data_offset + e["data_offsets"][0], shape=(n,)).reshape(shape)

    @staticmethod
    def to_f32(raw, dtype):
        import numpy as np

        if dtype == "BF16":
            a = raw.astype(np.uint32)
            a <<= 16
            return a.view(np.float32)
        return np.asarray(raw, dtype=np.float32)

    def f32_chunks(self, name, elems=1 << 24):
        flat = self.raw(name).reshape(-1)
        d = self.dtype(name)
        for i in range(0, flat.shape[0], elems):
            yield self.to_f32(flat[i:i + elems], d)

    def f32(self, name):
        return self.to_f32(self.raw(name), self.dtype(name))


# --------------------------------------------------------------------------------------------------
# Learning rate (recipes-and-measurement.md §3, Megatron's definitions)
# --------------------------------------------------------------------------------------------------


def megatron_lr(step, train_steps, max_lr, min_lr, warmup_fraction, decay_steps=0, style="cosine"):
    """Step k is 0-based and counts the steps taken before it: W = warmup_fraction * decay_steps;
    k <= W: max_lr * k / W (step 0 trains at lr 0); W < k <= decay: cosine (or linear) to min_lr."""
    decay = float(decay_steps if decay_steps > 0 else train_steps)
    warmup = warmup_fraction * decay
    k = float(step)
    if warmup > 0 and k <= warmup:
        return max_lr * k / warmup
    if style == "constant":
        return max_lr
    if k > decay:
        return min_lr
    ratio = (k - warmup) / (decay - warmup)
    if style == "cosine":
        coeff = 0.5 * (math.cos(math.pi * ratio) + 1.0)
    elif style == "linear":
        coeff = 1.0 - ratio
    else:
        raise ParityError(f"unknown lr decay style {style!r}")
    return min_lr + coeff * (max_lr - min_lr)


# recipes-and-measurement.md §3: the seed's schedule (20 steps, warm-up fraction 0.1, 1e-5 -> 1e-6)
SEED_LR_CHECK = [0, 5e-06, 1e-05, 9.932e-06, 9.729e-06, 9.397e-06, 8.947e-06, 8.393e-06, 7.75e-06, 7.039e-06,
                 6.281e-06, 5.5e-06, 4.719e-06, 3.961e-06, 3.25e-06, 2.607e-06, 2.053e-06, 1.603e-06, 1.271e-06,
                 1.068e-06]


def self_test_lr():
    for k, want in enumerate(SEED_LR_CHECK):
        got = megatron_lr(k, 20, 1e-5, 1e-6, 0.1)
        need(abs(got - want) <= 6e-10, f"megatron_lr self-test: step {k}: {got!r}, docs/recipes-and-measurement.md §3 says {want!r}")


# --------------------------------------------------------------------------------------------------
# Metrics and the convergence check (recipes-and-measurement.md §4; quill src/recipe/convergence.cc)
# --------------------------------------------------------------------------------------------------


def _num(v):
    return float("nan") if v is None else float(v)


def read_metrics(path):
    """metrics.jsonl -> dict of lists: step, loss, grad_norm (None when absent), lr, step_time_s. Lines
    must be in step order 0, 1, 2, ..."""
    out = {"step": [], "loss": [], "grad_norm": [], "lr": [], "step_time_s": []}
    with open(path) as f:
        for i, line in enumerate(f):
            line = line.strip()
            if not line:
                continue
            try:
                j = json.loads(line)
            except json.JSONDecodeError as ex:
                raise ParityError(f"{path}:{i + 1}: malformed JSON ({ex})")
            need("loss" in j, f"{path}:{i + 1}: no loss")
            out["step"].append(int(j.get("step", len(out["step"]))))
            out["loss"].append(_num(j["loss"]))
            out["grad_norm"].append(_num(j["grad_norm"]) if "grad_norm" in j else None)
            out["lr"].append(_num(j["lr"]) if "lr" in j else None)
            out["step_time_s"].append(_num(j["step_time_s"]) if "step_time_s" in j else None)
    need(out["step"] == list(range(len(out["step"]))), f"{path}: steps are not 0, 1, 2, ...: {out['step']}")
    return out


def relative_diff(c, g):
    return abs(c - g) / abs(g) if g != 0 else abs(c)


def _finite(x):
    return x is not None and math.isfinite(x)


def pearson(x, y):
    n = len(x)
    if n < 2:
        return None
    mx, my = sum(x) / n, sum(y) / n
    sxy = sum((a - mx) * (b - my) for a, b in zip(x, y))
    sxx = sum((a - mx) ** 2 for a in x)
    syy = sum((b - my) ** 2 for b in y)
    if sxx <= 0 or syy <= 0:
        return None
    r = sxy / math.sqrt(sxx * syy)
    return r if math.isfinite(r) else None


THRESHOLDS = {
    "skip_fraction": 0.20, "min_correlation": 0.95, "high_loss_tolerance": 0.10, "medium_loss_tolerance": 0.05,
    "low_loss_tolerance": 0.02, "final_loss_tolerance": 0.05, "max_failure_ratio": 0.10, "outlier_sigma": 3.0,
}


def max_relative_difference(cand, ref):
    """(value, step) over all common steps; NaN wins."""
    best, at = 0.0, 0
    for i in range(min(len(cand), len(ref))):
        d = relative_diff(cand[i], ref[i]) if (math.isfinite(cand[i]) and math.isfinite(ref[i])) else float("nan")
        if not (d <= best):
            best, at = d, i
            if math.isnan(d):
                break
    return best, at


def convergence_check(cand_loss, ref_loss, cand_gn=None, ref_gn=None, t=THRESHOLDS):
    r = {"points": min(len(cand_loss), len(ref_loss)), "failed": []}
    non_finite = []
    for what, v in (("candidate loss", cand_loss), ("candidate grad_norm", cand_gn),
                    ("reference loss", ref_loss), ("reference grad_norm", ref_gn)):
        for i, x in enumerate(v or []):
            if x is not None and not math.isfinite(x):
                non_finite.append(f"{what} step {i}: {x}")
    r["non_finite"] = non_finite
    finite_pass = not non_finite
    same_length = len(cand_loss) == len(ref_loss) and len(cand_loss) > 0
    n_pts = r["points"]
    r["max_relative_difference"], r["max_relative_difference_step"] = max_relative_difference(cand_loss, ref_loss)
    skipped = int(n_pts * t["skip_fraction"])
    c, g = cand_loss[skipped:n_pts], ref_loss[skipped:n_pts]
    r.update(skipped=skipped, compared=len(c), correlation=None, pointwise_failures=[], final_loss_candidate=None,
             final_loss_reference=None, final_loss_difference=None, outlier_count=0)
    corr_pass = point_pass = final_pass = outl_pass = False
    if c and finite_pass:
        n = float(len(c))
        r["correlation"] = pearson(c, g)
        corr_pass = r["correlation"] is not None and r["correlation"] >= t["min_correlation"]
        for i, (a, b) in enumerate(zip(c, g)):
            tol = t["high_loss_tolerance"] if b > 2.0 else t["medium_loss_tolerance"] if b > 0.5 else t["low_loss_tolerance"]
            d = relative_diff(a, b)
            if d > tol:
                r["pointwise_failures"].append({"step": skipped + i, "candidate": a, "reference": b,
                                                "relative_diff": d, "tolerance": tol})
        point_pass = len(r["pointwise_failures"]) / n <= t["max_failure_ratio"]
        r["final_loss_candidate"], r["final_loss_reference"] = c[-1], g[-1]
        r["final_loss_difference"] = relative_diff(c[-1], g[-1])
        final_pass = r["final_loss_difference"] <= t["final_loss_tolerance"]
        res = [a - b for a, b in zip(c, g)]
        mean = sum(res) / n
        sd = math.sqrt(sum((x - mean) ** 2 for x in res) / n)
        r["outlier_count"] = sum(1 for x in res if abs(x - mean) > t["outlier_sigma"] * sd)
        outl_pass = r["outlier_count"] / n <= t["max_failure_ratio"]
    checks = {"same_length": same_length, "finite": finite_pass, "correlation": corr_pass, "pointwise": point_pass,
              "final_loss": final_pass, "outliers": outl_pass}
    r["checks"] = {k: ("pass" if v else "fail") for k, v in checks.items()}
    r["failed"] = [k for k, v in checks.items() if not v]
    r["passed"] = not r["failed"]
    return r
