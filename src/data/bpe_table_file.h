// The built tables of a tiktoken rank file, kept next to it between processes.
//
// Why: building o200k_base's tables (the whole-piece table, every split of every token into two
// tokens, the character parts) took 0.15-0.21 s of one thread, a fifth of a 17 MB `quill data
// build` (bench/tokenizer/results/2026-12-04-local-startup.txt); reading them back is a copy of
// ~20 MB. The file is RANKS.quill-tables, written by the first load of RANKS that can write it.
//
// It is trusted only when all of these match, else it is ignored, rebuilt and rewritten (never an
// error; the ids never depend on whether it was used, tests/data/bpe_table_file_test.cc):
//   - the format: a magic, the byte order, and the SHA-256 of the sources that build the tables
//     (QUILL_BPE_TABLES_FINGERPRINT, generated at build time from src/data/bpe*, rank_file.* and
//     line_ranges.h), so a change to how the tables are built invalidates every file;
//   - the rank file: its SHA-256 (which the tokenizer's definition hashes anyway) and its size;
//   - the file itself: every section's size, and a checksum of the whole content.
// It is written to a temporary name and renamed (base/file_util.h), so a reader sees a whole file
// or none, except after a crash (it is not flushed: a torn file fails the checksum and is
// rebuilt); a folder that cannot be written (read-only) is simply not cached.
// QUILL_TOKENIZER_CACHE=0 neither reads nor writes it (the load then builds, as before).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "base/thread_pool.h"
#include "data/bpe.h"

namespace quill {

struct TableFilePolicy {
  bool enabled = true;
  // Smaller rank files are not cached (they build in milliseconds; tests write many of them).
  uint64_t min_rank_file_bytes = uint64_t{256} << 10;
  // QUILL_TOKENIZER_CACHE: unset or anything but "0" enabled; "0" disabled.
  static TableFilePolicy from_env();
};

// The table file of `ranks_path`: ranks_path + ".quill-tables".
std::string bpe_table_file_path(const std::string& ranks_path);

// The core in `file` when it is there and matches the format and the rank file (SHA-256 in hex,
// size); nullopt otherwise (missing, stale, damaged, unreadable). Copied on `pool`; ranks_sha256
// is called once the tables are copied (so that the rank file can be hashed meanwhile).
std::optional<BpeCore> read_bpe_table_file(const std::string& file, const std::function<std::string()>& ranks_sha256,
                                           uint64_t ranks_bytes, ThreadPool& pool);
inline std::optional<BpeCore> read_bpe_table_file(const std::string& file, const std::string& ranks_sha256,
                                                  uint64_t ranks_bytes, ThreadPool& pool) {
  return read_bpe_table_file(file, [&] { return ranks_sha256; }, ranks_bytes, pool);
}

// Writes `core` (built from the rank file of that SHA-256 and size) to `file` atomically; false,
// with nothing under the final name, when it cannot (a read-only folder, a full disk).
bool write_bpe_table_file(const std::string& file, const BpeCore& core, std::string_view ranks_sha256,
                          uint64_t ranks_bytes);

}  // namespace quill
