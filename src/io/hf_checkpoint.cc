#include "io/hf_checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "base/error.h"
#include "base/file_util.h"
#include "base/progress.h"
#include "io/dir_swap.h"
#include "io/hf_part_rows.h"
#include "io/write_progress.h"

namespace quill {

namespace fs = std::filesystem;

namespace {

bool is_float(DType d) { return d == DType::F32 || d == DType::F64 || d == DType::BF16 || d == DType::F16; }

// n elements of `src` (any float dtype, possibly unaligned) to fp32.
void to_f32(const char* src, DType dtype, float* dst, int64_t n) {
  switch (dtype) {
    case DType::F32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); return;
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t b;
        std::memcpy(&b, src + 2 * i, 2);
        dst[i] = bf16_to_f32(b);
      }
      return;
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = f16_to_f32(h);
      }
      return;
    case DType::F64:
      for (int64_t i = 0; i < n; ++i) {
        double v;
        std::memcpy(&v, src + 8 * i, 8);
        dst[i] = static_cast<float>(v);
      }
      return;
    default: QUILL_FAIL("to_f32: {} is not a float dtype", dtype_name(dtype));
  }
}

// n fp32 elements to `dtype` (round to nearest even).
void from_f32(const float* src, DType dtype, char* dst, int64_t n) {
  switch (dtype) {
    case DType::F32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); return;
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t b = f32_to_bf16(src[i]);
        std::memcpy(dst + 2 * i, &b, 2);
      }
      return;
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h = f32_to_f16(src[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
    case DType::F64:
      for (int64_t i = 0; i < n; ++i) {
        double v = src[i];
        std::memcpy(dst + 8 * i, &v, 8);
      }
      return;
    default: QUILL_FAIL("from_f32: {} is not a float dtype", dtype_name(dtype));
  }
}

// Rows of the last dimension: (row count over all leading dims, F = dim(-2)/2, row length).
struct RowLayout {
  int64_t rows = 1, f = 0, cols = 1;
};

RowLayout gate_up_layout(const Shape& shape, const std::string& what) {
  QUILL_CHECK(shape.size() >= 2 && shape[shape.size() - 2] % 2 == 0,
              "{}: gate/up tensor of shape {} needs at least 2 dimensions and an even dimension -2", what,
              shape_str(shape));
  RowLayout l;
  l.cols = shape.back();
  for (size_t i = 0; i + 1 < shape.size(); ++i) l.rows *= shape[i];
  l.f = shape[shape.size() - 2] / 2;
  return l;
}

// Global row r (over leading blocks of 2F rows) in one layout -> global row in the other.
int64_t to_split(int64_t r, int64_t f) { return (r / (2 * f)) * 2 * f + split_row_of(r % (2 * f), f); }
int64_t to_interleaved(int64_t s, int64_t f) {
  int64_t block = s / (2 * f), i = s % (2 * f);
  return block * 2 * f + (i < f ? 2 * i : 2 * (i - f) + 1);
}

Tensor reorder_rows(const Tensor& t, bool to_split_layout) {
  QUILL_CHECK(t.device() == Device::CPU, "gate/up reorder needs a CPU tensor, got {}", t.describe());
  RowLayout l = gate_up_layout(t.shape(), "gate/up reorder");
  Tensor out = Tensor::empty(t.shape(), t.dtype());
  size_t row_bytes = static_cast<size_t>(l.cols) * dtype_size(t.dtype());
  const char* src = static_cast<const char*>(t.data());
  char* dst = static_cast<char*>(out.data());
  for (int64_t r = 0; r < l.rows && l.f > 0; ++r) {
    int64_t d = to_split_layout ? to_split(r, l.f) : to_interleaved(r, l.f);
    std::memcpy(dst + static_cast<size_t>(d) * row_bytes, src + static_cast<size_t>(r) * row_bytes, row_bytes);
  }
  return out;
}

std::string normalized_dir(const std::string& dir) {
  fs::path p = fs::path(dir).lexically_normal();
  if (!p.has_filename() && p.has_parent_path()) p = p.parent_path();  // "out/" -> "out"
  return p.string();
}

bool is_side_file(const std::string& name) {
  if (name == "config.json" || name == CheckpointDir::kIndexFile) return false;
  if (name.find(".tmp") != std::string::npos) return false;
  for (const char* ext : {".json", ".jinja", ".txt", ".model", ".tiktoken"})
    if (name.size() > std::strlen(ext) && name.ends_with(ext)) return true;
  return false;
}

// The item that writes one part of a parameter in `dtype`, in the part's row order.
SafetensorsItem part_item(const Param& p, const CheckpointPart& part, DType dtype) {
  SafetensorsItem item;
  item.name = part.name;
  item.dtype = dtype_name(dtype);
  item.shape = part.shape;
  item.nbytes = static_cast<size_t>(shape_numel(part.shape)) * dtype_size(dtype);
  Tensor value = p.value;
  const PartRows rows = part_rows(p, part);
  Shape shape = part.shape;
  item.bytes = [value, rows, shape, dtype]() -> Tensor {
    if (rows.identity() && dtype == DType::F32) return value;
    Tensor out = Tensor::empty(shape, dtype);
    const float* src = value.data_as<float>();
    char* dst = static_cast<char*>(out.data());
    if (rows.identity()) {
      from_f32(src, dtype, dst, value.numel());
      return out;
    }
    const size_t row_bytes = static_cast<size_t>(rows.cols) * dtype_size(dtype);
    for (int64_t i = 0; i < rows.file_rows; ++i)
      from_f32(src + rows.internal_row(i) * rows.cols, dtype, dst + static_cast<size_t>(i) * row_bytes, rows.cols);
    return out;
  };
  return item;
}

void check_param_for_save(const Param& p, DType dtype) {
  QUILL_CHECK(is_float(dtype), "save: parameter {} has checkpoint dtype {}, not a float dtype", p.name, dtype_name(dtype));
  QUILL_CHECK(p.value.defined(), "save: parameter {} has no value", p.name);
  QUILL_CHECK(p.value.device() == Device::CPU && p.value.dtype() == DType::F32,
              "save: parameter {} value is {}, expected an F32 CPU tensor", p.name, p.value.describe());
  QUILL_CHECK(p.value.shape() == p.shape, "save: parameter {} value has shape {}, the table says {}", p.name,
              shape_str(p.value.shape()), shape_str(p.shape));
  if (p.gate_up_interleaved) gate_up_layout(p.shape, "save: parameter " + p.name);
}

// Puts the complete tmp directory in place of out, recoverably (io/dir_swap.h).
void swap_into_place(const std::string& tmp, const std::string& out) { swap_dir_into_place(tmp, out); }

}  // namespace

Tensor deinterleave_gate_up(const Tensor& interleaved) { return reorder_rows(interleaved, true); }
Tensor interleave_gate_up(const Tensor& split) { return reorder_rows(split, false); }

void load_hf_checkpoint(const std::string& dir, ParamTable& table, LoadReport* report, bool show_progress) {
  CheckpointDir ckpt = CheckpointDir::open(dir);
  LoadReport local;
  local.format = detect_hf_format(ckpt.names());
  std::set<std::string> consumed;
  Progress progress("loading " + dir, ProgressOptions::counting(show_progress, "parameters"));
  const int64_t parameters = static_cast<int64_t>(table.params().size());
  for (Param& p : table.params()) {
    progress.update(static_cast<int64_t>(local.loaded.size()), parameters, fmt::format("{:.2f} GB read", local.bytes_read / 1e9));
    if (!p.value.defined()) p.value = Tensor::empty(p.shape, DType::F32);
    QUILL_CHECK(p.value.device() == Device::CPU && p.value.dtype() == DType::F32 && p.value.shape() == p.shape,
                "load: parameter {} value is {}, expected F32{} on the CPU", p.name, p.value.describe(), shape_str(p.shape));
    // The checkpoint holds the whole (global) tensor; a rank of a layout reads only its slice of it
    // (parallel/shard_spec.h), straight from the memory-mapped file.
    Param whole = p;
    whole.shape = p.shard.global_shape.empty() ? p.shape : p.shard.global_shape;
    const bool sliced = whole.shape != p.shape;
    const RowMap slice = sliced ? row_map(p.shard) : RowMap{};
    const std::vector<CheckpointPart> parts = checkpoint_parts(whole, local.format);
    for (size_t k = 0; k < parts.size(); ++k) {
      const CheckpointPart& part = parts[k];
      // In the transformers form, a message also names quill's parameter.
      const std::string also =
          part.name == p.name ? "" : fmt::format(" (quill's {}; the checkpoint has transformers' names)", p.name);
      QUILL_CHECK(ckpt.contains(part.name), "{}: tensor {} missing{}", dir, part.name, also);
      const SafetensorsEntry& e = ckpt.entry(part.name);
      QUILL_CHECK(e.shape == part.shape, "{}: tensor {} has shape {} in the checkpoint, the model expects {}{}", dir,
                  part.name, shape_str(e.shape), shape_str(part.shape), also);
      QUILL_CHECK(e.dtype.has_value() && is_float(*e.dtype),
                  "{}: tensor {} has dtype {}, which does not load into a parameter", dir, part.name, e.dtype_str);
      if (part.interleaved) gate_up_layout(whole.shape, fmt::format("{}: tensor {}", dir, part.name));
      Tensor src = ckpt.tensor(part.name);
      const char* s = static_cast<const char*>(src.data());
      float* d = p.value.data_as<float>();
      const PartRows rows = part_rows(whole, part);
      if (sliced) {
        const size_t item = dtype_size(*e.dtype), row_bytes = static_cast<size_t>(rows.cols) * item;
        const int64_t n = slice.col_end - slice.col_begin;
        for (int64_t i = 0; i < rows.file_rows; ++i) {
          const int64_t local_row = slice.local_row[static_cast<size_t>(rows.internal_row(i))];
          if (local_row < 0) continue;
          to_f32(s + static_cast<size_t>(i) * row_bytes + static_cast<size_t>(slice.col_begin) * item, *e.dtype,
                 d + local_row * n, n);
        }
      } else if (rows.identity()) {
        to_f32(s, *e.dtype, d, src.numel());
      } else {
        const size_t row_bytes = static_cast<size_t>(rows.cols) * dtype_size(*e.dtype);
        for (int64_t i = 0; i < rows.file_rows; ++i)
          to_f32(s + static_cast<size_t>(i) * row_bytes, *e.dtype, d + rows.internal_row(i) * rows.cols, rows.cols);
      }
      if (k == 0) p.checkpoint_dtype = *e.dtype;
      consumed.insert(part.name);
      local.bytes_read += e.nbytes();
    }
    local.loaded.push_back(p.name);
  }
  progress.update(parameters, parameters, fmt::format("{:.2f} GB read", local.bytes_read / 1e9));
  progress.finish();
  for (const std::string& name : ckpt.names())
    if (!consumed.count(name)) local.pass_through.push_back(name);
  if (report) *report = std::move(local);
}

std::string checked_hf_out_dir(const std::string& out_dir, bool overwrite) {
  const std::string out = normalized_dir(out_dir);
  QUILL_CHECK(!out.empty() && out != "." && out != "/", "save: '{}' is not a usable output directory", out_dir);
  if (fs::exists(out)) {
    QUILL_CHECK(fs::is_directory(out), "{}: exists and is not a directory", out);
    QUILL_CHECK(fs::is_empty(out) || overwrite, "{}: exists and is not empty (pass overwrite to replace it)", out);
  }
  return out;
}

HfTensorList hf_tensor_list(const std::vector<Param>& params, HfFormat format,
                            const std::function<DType(const Param&)>& dtype_of, const std::string& source_dir) {
  HfTensorList list;
  std::set<std::string> in_table, written;
  for (size_t i = 0; i < params.size(); ++i) {
    const Param& p = params[i];
    QUILL_CHECK(in_table.insert(p.name).second, "save: parameter {} appears twice in the table", p.name);
    const DType dtype = dtype_of(p);
    QUILL_CHECK(is_float(dtype), "save: parameter {} has checkpoint dtype {}, not a float dtype", p.name, dtype_name(dtype));
    if (p.gate_up_interleaved) gate_up_layout(p.shape, "save: parameter " + p.name);
    const std::vector<CheckpointPart> parts = checkpoint_parts(p, format);
    for (size_t k = 0; k < parts.size(); ++k) {
      const CheckpointPart& part = parts[k];
      QUILL_CHECK(written.insert(part.name).second, "save: tensor {} would be written twice", part.name);
      SafetensorsItem item;
      item.name = part.name;
      item.dtype = dtype_name(dtype);
      item.shape = part.shape;
      item.nbytes = static_cast<size_t>(shape_numel(part.shape)) * dtype_size(dtype);
      list.items.push_back(std::move(item));
      list.origins.push_back({i, k, ""});
      list.report.written.push_back(part.name);
    }
  }
  if (source_dir.empty()) return list;
  list.source = CheckpointDir::open(source_dir);
  // The source's own names for the table's tensors; the rest is passed through when the source
  // is in the form being written (its names mean nothing in the other form).
  const HfFormat source_format = detect_hf_format(list.source->names());
  std::set<std::string> source_table;
  for (const Param& p : params)
    for (const CheckpointPart& part : checkpoint_parts(p, source_format)) source_table.insert(part.name);
  for (const std::string& name : list.source->names()) {
    if (source_table.count(name)) continue;
    if (source_format != format || written.count(name)) {
      list.report.dropped.push_back(name);
      continue;
    }
    const SafetensorsEntry& e = list.source->entry(name);
    SafetensorsItem item;
    item.name = name;
    item.dtype = e.dtype_str;
    item.shape = e.shape;
    item.nbytes = e.nbytes();
    list.items.push_back(std::move(item));
    list.origins.push_back({HfTensorList::kPassThrough, 0, name});
    list.report.passed_through.push_back(name);
  }
  return list;
}

void copy_hf_side_files(const std::string& source_dir, const std::string& to) {
  for (const auto& entry : fs::directory_iterator(source_dir)) {
    std::string name = entry.path().filename().string();
    if (entry.is_regular_file() && is_side_file(name))
      fs::copy_file(entry.path(), fs::path(to) / name, fs::copy_options::overwrite_existing);
  }
}

SaveReport save_hf_checkpoint(const std::string& out_dir, const ParamTable& table, const std::string& source_dir,
                              const std::string& config_json, const SaveOptions& options) {
  const std::string out = checked_hf_out_dir(out_dir, options.overwrite);
  QUILL_CHECK(nlohmann::json::accept(config_json), "{}: the config.json text to write is not valid JSON", out);

  // Everything that can be checked is checked before anything is written.
  const auto dtype_of = [&options](const Param& p) {
    return options.dtype_of ? options.dtype_of(p) : options.force_dtype.value_or(p.checkpoint_dtype);
  };
  for (const Param& p : table.params()) check_param_for_save(p, dtype_of(p));
  HfTensorList list = hf_tensor_list(table.params(), options.format, dtype_of, source_dir);
  std::vector<SafetensorsItem>& items = list.items;
  for (size_t i = 0; i < items.size(); ++i) {
    const HfTensorList::Origin& o = list.origins[i];
    if (o.param == HfTensorList::kPassThrough) {
      items[i] = SafetensorsItem::from_file(o.source_name, list.source->file_of(o.source_name), o.source_name);
    } else {
      const Param& p = table.params()[o.param];
      items[i] = part_item(p, checkpoint_parts(p, options.format)[o.part], dtype_of(p));
    }
  }
  const SaveReport& report = list.report;
  const std::optional<CheckpointDir>& source = list.source;

  const std::string tmp = out + ".tmp-" + std::to_string(::getpid());
  try {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    make_dirs(tmp);
    CheckpointWriteOptions wopt;
    wopt.max_shard_bytes = options.max_shard_bytes;
    Progress progress("saving " + out, ProgressOptions::in_bytes(options.show_progress));
    count_written_bytes(items, progress);
    write_checkpoint_dir(tmp, items, wopt);
    progress.finish();
    write_file_atomic((fs::path(tmp) / "config.json").string(), config_json);
    if (source && options.copy_side_files) copy_hf_side_files(source_dir, tmp);
    swap_into_place(tmp, out);
    return report;
  } catch (const fs::filesystem_error& e) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    QUILL_FAIL("{}: save failed ({})", out, e.what());
  } catch (...) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw;
  }
}

}  // namespace quill
