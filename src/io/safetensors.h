// safetensors: one file = 8-byte little-endian header length N, N bytes of JSON header
// ({name: {dtype, shape, data_offsets: [begin, end)}, optional "__metadata__": {string: string}}),
// then the data block that the offsets index. Reference: huggingface/safetensors (Rust crate).
//
// Reading maps the file and hands out zero-copy CPU tensor views that keep the mapping alive. The
// views are READ-ONLY memory (PROT_READ): clone() before writing. Every header field is validated
// and every error names the file, and the tensor where there is one. Gaps between tensors in the
// data block are tolerated (the reference rejects them); overlaps and out-of-range offsets are not.
//
// Writing streams one tensor at a time to "<path>.tmp.<pid>", fsyncs, and renames onto the path, so
// a failure never leaves a partial file under the final name. The header is padded with spaces to a
// multiple of 8 bytes, as the reference writer does.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tensor/tensor.h"

namespace quill {

// Bits per element of a safetensors dtype string ("BF16" -> 16, "F8_E4M3" -> 8, "F4" -> 4);
// nullopt for a string the format does not define.
std::optional<int> safetensors_dtype_bits(const std::string& dtype);

struct SafetensorsEntry {
  std::string name;
  std::string dtype_str;          // as written in the header ("BF16", "F8_E4M3", ...)
  std::optional<DType> dtype;     // quill's dtype when quill has one
  Shape shape;
  size_t begin = 0, end = 0;      // [begin, end) within the data block
  size_t nbytes() const { return end - begin; }
};

class SafetensorsFile {
 public:
  // Maps and validates the file; throws quill::Error naming the file (and tensor).
  static SafetensorsFile open(const std::string& path);

  const std::string& path() const { return path_; }
  // Tensor names in data-block order.
  const std::vector<std::string>& names() const { return names_; }
  bool contains(const std::string& name) const { return entries_.count(name) != 0; }
  const SafetensorsEntry& entry(const std::string& name) const;  // throws naming file and tensor
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  size_t data_bytes() const { return data_bytes_; }  // size of the data block
  // Where the data block starts in the file (8 + header length): a tensor's bytes are at
  // data_offset() + entry.begin, for readers that pread() them instead of touching the mapping
  // (whose pages, once read, count in the process's resident memory).
  size_t data_offset() const { return data_offset_; }

  // Zero-copy read-only CPU view; throws when quill has no DType for the tensor's dtype.
  Tensor tensor(const std::string& name) const;
  // The tensor's raw bytes as a U8 [nbytes] view (any dtype, including ones quill cannot compute in).
  Tensor raw(const std::string& name) const;

 private:
  std::string path_;
  std::shared_ptr<Storage> mapping_;  // the whole file; views share it
  size_t data_offset_ = 0;            // 8 + N
  size_t data_bytes_ = 0;
  std::map<std::string, SafetensorsEntry> entries_;
  std::vector<std::string> names_;
  std::map<std::string, std::string> metadata_;
};

// One tensor to write: header fields and a producer of its bytes. The producer is called once,
// when the writer reaches the tensor, so a converted copy lives only while it is written. It must
// return a CPU tensor of exactly `nbytes` bytes (its own dtype and shape are not looked at).
struct SafetensorsItem {
  std::string name;
  std::string dtype;  // safetensors spelling
  Shape shape;
  size_t nbytes = 0;
  std::function<Tensor()> bytes;

  // A CPU tensor, written as it is.
  static SafetensorsItem from_tensor(std::string name, Tensor tensor);
  // A tensor of `file`, copied byte for byte under `name` (whatever its dtype).
  static SafetensorsItem from_file(std::string name, const SafetensorsFile& file, const std::string& source_name);
};

// Header of a file holding `items` in order (metadata omitted when empty), padded to a multiple of 8.
std::string safetensors_header(const std::vector<SafetensorsItem>& items,
                               const std::map<std::string, std::string>& metadata);

// Writes items in order to path (tmp name, fsync, rename). Names must be unique.
// Tensors are written by `threads` threads (<= 0: default_write_threads(), io/parallel_pwrite.h).
// With `sha256`: the file's SHA-256 (lowercase hex) is put there, hashed on a thread of its own from
// the bytes as they are handed to the writing threads (no second read of the file).
void write_safetensors(const std::string& path, const std::vector<SafetensorsItem>& items,
                       const std::map<std::string, std::string>& metadata = {}, int threads = 0,
                       std::string* sha256 = nullptr);
void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {}, int threads = 0,
                       std::string* sha256 = nullptr);

// Streams `items` to `tmp_path` (created, fsynced, closed) without renaming: for writers that
// rename several files only once all succeeded. Removes tmp_path when it throws. `label` names the
// final file in messages.
void write_safetensors_unrenamed(const std::string& tmp_path, const std::string& label,
                                 const std::vector<SafetensorsItem>& items,
                                 const std::map<std::string, std::string>& metadata, int threads = 0,
                                 std::string* sha256 = nullptr);

}  // namespace quill
