// The SFT rows file (docs/rows-format.md): a directory with rows.bin and manifest.json.
//
// rows.bin, all integers little-endian:
//   offset 0   8 bytes   magic "QUILLROW"
//   offset 8   u32       version (1)
//   offset 12  u32       row_tokens (T > 0)
//   offset 16  u64       rows (R)
//   offset 24  40 bytes  reserved, zero
//   offset 64            R*T u32 token ids, row after row
//   offset 64 + 4*R*T    R*T mask bytes (0 or 1), row after row
// File size is exactly 64 + 5*R*T. Both sections start 4-byte aligned, so a memory map gives
// uint32 token rows directly.
//
// rows_sha256 (manifest): SHA-256 over, for each row in order, its T token ids as LE uint32
// followed by its T mask bytes. Independent of the file layout, so it names the data itself.
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>

namespace quill {

class BuildTiming;

inline constexpr char kRowsMagic[8] = {'Q', 'U', 'I', 'L', 'L', 'R', 'O', 'W'};
inline constexpr uint32_t kRowsVersion = 1;
inline constexpr int64_t kRowsHeaderBytes = 64;
inline constexpr const char* kRowsFile = "rows.bin";
inline constexpr const char* kManifestFile = "manifest.json";

// Supervised targets of one row: the number of t in 1..T-1 with mask[t] == 1 (the target of
// position t-1 is token t, and its mask bit is mask[t]).
int64_t count_supervised_targets(std::span<const uint8_t> mask);

// What a writer computed over its rows, for the manifest.
struct RowsSummary {
  int64_t rows = 0;
  int64_t row_tokens = 0;
  int64_t supervised_targets = 0;
  int64_t max_token_id = -1;
  std::string rows_sha256;
};

// For the writers (RowsWriter, ParallelRowsWriter), so both write the same bytes:
// an error unless `extras` is an object that sets none of the computed fields;
void check_manifest_extras(const std::string& dir, const nlohmann::json& extras);
// the 64-byte header of rows.bin;
std::array<unsigned char, kRowsHeaderBytes> rows_header(int64_t row_tokens, int64_t rows);
// `extras` plus the computed fields (see RowsWriter::finish);
nlohmann::json rows_manifest(const std::string& dir, const nlohmann::json& extras, const RowsSummary& summary);
// a finished, fsynced temporary rows file put in place: the old manifest removed, the rows
// renamed to rows.bin, then the new manifest written (atomically).
void install_rows(const std::string& dir, const std::string& rows_tmp, const nlohmann::json& manifest);

// Streams rows into `out_dir` under temporary names; finish() writes rows.bin and manifest.json
// (each via a temporary name and rename). Destroyed without finish(), it removes its temporaries
// and leaves whatever was in out_dir before untouched.
class RowsWriter {
 public:
  RowsWriter(const std::string& out_dir, int64_t row_tokens);
  ~RowsWriter();
  RowsWriter(const RowsWriter&) = delete;
  RowsWriter& operator=(const RowsWriter&) = delete;

  // Appends one row: exactly row_tokens ids and as many mask bytes (0 or 1).
  void append(std::span<const uint32_t> tokens, std::span<const uint8_t> mask);

  // Writes the files and returns the manifest. The writer fills rows, row_tokens,
  // padding_tokens (0), rows_sha256, supervised_targets, supervised_token_ratio
  // (= supervised_targets / (rows * row_tokens), 0 when there are no rows), max_token_id and
  // format/format_version; `extras` (an object) adds the rest (seed, tokenizer, renderer, ...) and
  // may not set those fields.
  nlohmann::json finish(const nlohmann::json& extras);

  int64_t rows() const { return rows_; }
  int64_t row_tokens() const { return row_tokens_; }
  // Adds the time spent hashing and writing to `timing` (nullptr: not timed).
  void set_timing(BuildTiming* timing) { timing_ = timing; }

 private:
  struct Impl;
  BuildTiming* timing_ = nullptr;
  std::string dir_;
  int64_t row_tokens_;
  int64_t rows_ = 0;
  int64_t supervised_ = 0;
  int64_t max_token_id_ = -1;
  bool finished_ = false;
  Impl* impl_;
};

// A rows directory opened read-only: rows.bin memory-mapped, checked against its own size and
// against manifest.json. Move-only.
class RowsReader {
 public:
  // Errors name the file and the field (truncated file, bad magic, version, size, a manifest
  // value that disagrees with the header). verify_sha256 also hashes every row and checks the
  // mask bytes (reads the whole file).
  static RowsReader open(const std::string& dir, bool verify_sha256 = false);

  RowsReader(RowsReader&& other) noexcept;
  RowsReader& operator=(RowsReader&& other) noexcept;
  RowsReader(const RowsReader&) = delete;
  RowsReader& operator=(const RowsReader&) = delete;
  ~RowsReader();

  int64_t rows() const { return rows_; }
  int64_t row_tokens() const { return row_tokens_; }
  const uint32_t* tokens(int64_t row) const;
  const uint8_t* mask(int64_t row) const;
  int64_t supervised_targets(int64_t row) const;
  const nlohmann::json& manifest() const { return manifest_; }
  const std::string& dir() const { return dir_; }

  // SHA-256 of the rows in the canonical order (see the top of this file).
  std::string compute_rows_sha256() const;
  // compute_rows_sha256() against the manifest, plus every mask byte is 0 or 1.
  void verify() const;

 private:
  RowsReader() = default;
  void release();

  std::string dir_;
  nlohmann::json manifest_;
  const uint8_t* map_ = nullptr;
  size_t map_bytes_ = 0;
  int64_t rows_ = 0;
  int64_t row_tokens_ = 0;
};

}  // namespace quill
