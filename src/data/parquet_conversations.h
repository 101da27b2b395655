// Conversations read from Parquet files in the shape of allenai/tulu-3-sft-mixture
// (docs/parquet.md): a column `messages` of type list<struct<content: string, role: string>>
// and, optionally, string columns `id` and `source`. Several files are read in order, their row
// groups and columns in parallel; the conversations come out in file order, row by row, as the
// same Conversation values the JSONL reader makes of the same data, so the data build renders
// them identically.
//
// What a row means, by its levels (parquet_schema.h): a null `messages` list, a null message
// (struct), a null role, an unknown role or text that is not UTF-8 make the conversation
// invalid; a null content is empty text (as JSON null content is); an empty list is an empty
// conversation (as `"messages": []` is). An invalid conversation is an error naming the file,
// the row (0-based, counted over the file's row groups), its id, the message and the column,
// or with skip_invalid it is left out and counted.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/conversation.h"
#include "base/thread_pool.h"

namespace quill {

class BuildTiming;
class ParquetFile;

struct ParquetReadOptions {
  bool skip_invalid = false;     // leave invalid conversations out (counted) instead of failing
  bool sha256 = false;           // hash the files' bytes, in order, while they are read
  BuildTiming* timing = nullptr;  // phases for --timing
};

// What each input file is.
struct ParquetFileSummary {
  std::string path;
  int64_t bytes = 0;
  int64_t rows = 0;
  int64_t row_groups = 0;
};

class ParquetConversations {
 public:
  // Reads every file in `paths`, in order, on `pool`. Errors name the file (and the row group,
  // column, page or row where they apply).
  static ParquetConversations read(const std::vector<std::string>& paths, ThreadPool& pool,
                                   const ParquetReadOptions& options = {});

  ParquetConversations(ParquetConversations&&) noexcept;
  ParquetConversations& operator=(ParquetConversations&&) noexcept;
  ~ParquetConversations();

  // The conversations kept (every row, unless some were invalid and skipped).
  int64_t size() const { return total_; }
  // Conversation k as the JSONL reader would make it; `out` is overwritten, its storage reused.
  void fill(int64_t k, Conversation& out) const;
  Conversation conversation(int64_t k) const;
  // Its id and source (empty when the file has no such string column, or the value is null).
  std::string_view id(int64_t k) const;
  std::string_view source(int64_t k) const;
  // The bytes of its messages' content (for progress).
  int64_t content_bytes(int64_t k) const;

  int64_t rows() const { return rows_; }                  // every row of every file
  int64_t invalid_skipped() const { return rows_ - total_; }
  const std::vector<std::string>& skipped_errors() const { return skipped_errors_; }  // the first few
  const std::vector<ParquetFileSummary>& files() const { return files_; }
  int64_t bytes() const;                                   // of every file
  const std::string& sha256() const { return sha256_; }    // hex; empty unless asked for

  struct Block;  // one row group's conversations (parquet_conversations.cc)

 private:
  ParquetConversations();
  std::pair<const Block*, size_t> locate(int64_t k) const;

  std::vector<std::unique_ptr<ParquetFile>> open_;  // mapped: uncompressed pages are read in place
  std::vector<std::unique_ptr<Block>> blocks_;  // row group after row group, file after file
  std::vector<int64_t> block_start_;            // the first conversation of each block
  int64_t total_ = 0, rows_ = 0;
  std::vector<std::string> skipped_errors_;
  std::vector<ParquetFileSummary> files_;
  std::string sha256_;
};

}  // namespace quill
