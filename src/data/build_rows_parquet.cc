// The data build from Parquet files (build_rows.h, docs/parquet.md), and the choice between
// Parquet and JSONL input.
#include <cstdio>
#include <filesystem>

#include "base/error.h"
#include "data/build_rows.h"
#include "base/thread_pool.h"
#include "data/parquet_conversations.h"
#include "data/parquet_file.h"
#include "data/rows_pipeline.h"
#include "data/timed_renderer.h"

namespace quill {

namespace {

std::string joined(const std::vector<std::string>& paths) {
  std::string s;
  for (const std::string& p : paths) s += (s.empty() ? "" : ", ") + p;
  return s;
}

// The check of a recipe's parquet_bytes, before anything is read.
void check_expected_bytes(const std::vector<std::string>& paths, const BuildOptions& options) {
  if (options.expected_parquet_bytes < 0) return;
  int64_t bytes = 0;
  for (const std::string& p : paths) {
    std::error_code ec;
    uintmax_t n = std::filesystem::file_size(p, ec);
    QUILL_CHECK(!ec, "{}: cannot read its size ({})", p, ec.message());
    bytes += static_cast<int64_t>(n);
  }
  QUILL_CHECK(bytes == options.expected_parquet_bytes,
              "{}: {} bytes, but {} has parquet_bytes {}: not the recipe's dataset", joined(paths), bytes,
              options.expected_from, options.expected_parquet_bytes);
}

}  // namespace

nlohmann::json build_rows_from_parquet(const std::vector<std::string>& paths, const Tokenizer& tokenizer,
                                       const BuildOptions& options, const std::string& out_dir) {
  TimedRenderer r(tokenizer, options);  // checks the effort first
  check_expected_bytes(paths, options);
  ThreadPool pool(options.threads);
  ParquetReadOptions read_options;
  read_options.skip_invalid = options.skip_invalid;
  read_options.sha256 = true;  // recorded in the manifest; one task beside the column reads
  read_options.timing = options.timing;
  ParquetConversations convs = ParquetConversations::read(paths, pool, read_options);
  if (!options.expected_parquet_sha256.empty()) {
    QUILL_CHECK(convs.sha256() == options.expected_parquet_sha256,
                "{}: sha256 {}, but {} has parquet_sha256 {}: not the recipe's dataset", joined(paths), convs.sha256(),
                options.expected_from, options.expected_parquet_sha256);
  }
  if (convs.invalid_skipped() > 0) {
    for (const std::string& e : convs.skipped_errors()) std::fprintf(stderr, "quill: skipped %s\n", e.c_str());
    std::fprintf(stderr, "quill: skipped %lld invalid row(s) of %lld\n", static_cast<long long>(convs.invalid_skipped()),
                 static_cast<long long>(convs.rows()));
  }
  QUILL_CHECK(convs.size() > 0, "{}: no valid conversation ({} rows)", joined(paths), convs.rows());

  RowsSource source;
  source.conversations = convs.size();
  source.render = [&](int64_t k, MaskedTokens& out) {
    // One Conversation per thread, refilled for each conversation, so that its vectors and
    // strings keep their storage from one conversation to the next.
    thread_local Conversation scratch;
    {
      WorkTimer t(options.timing, BuildTiming::kParse);
      convs.fill(k, scratch);
    }
    WorkTimer t(options.timing, BuildTiming::kRender);
    r.renderer.render_into(scratch, out);
  };
  source.bytes = [&](int64_t k) { return convs.content_bytes(k); };

  nlohmann::json files = nlohmann::json::array();
  for (const ParquetFileSummary& f : convs.files()) {
    files.push_back({{"path", f.path}, {"bytes", f.bytes}, {"rows", f.rows}, {"row_groups", f.row_groups}});
  }
  nlohmann::json extras = {{"invalid_skipped", convs.invalid_skipped()},
                           {"input",
                            {{"format", "parquet"},
                             {"files", files},
                             {"bytes", convs.bytes()},
                             {"rows", convs.rows()},
                             {"parquet_sha256", convs.sha256()}}}};
  return build_rows_from_source(source, r.renderer, options, out_dir, extras, pool);
}

nlohmann::json build_rows_from_inputs(const std::vector<std::string>& paths, const Tokenizer& tokenizer,
                                      const BuildOptions& options, const std::string& out_dir) {
  QUILL_CHECK(!paths.empty(), "--input: no input file");
  size_t parquet = 0;
  for (const std::string& p : paths) {
    bool magic = has_parquet_magic(p);
    QUILL_CHECK(magic || std::filesystem::path(p).extension() != ".parquet",
                "{}: not a Parquet file (it does not start with the magic PAR1)", p);
    parquet += magic;
  }
  if (parquet == paths.size()) return build_rows_from_parquet(paths, tokenizer, options, out_dir);
  QUILL_CHECK(parquet == 0, "--input: {} is Parquet and {} is not: give Parquet files only, or one JSONL file",
              [&] {
                for (const std::string& p : paths) if (has_parquet_magic(p)) return p;
                return std::string();
              }(),
              [&] {
                for (const std::string& p : paths) if (!has_parquet_magic(p)) return p;
                return std::string();
              }());
  QUILL_CHECK(paths.size() == 1, "--input: {} JSONL files ({}): quill reads several files only when they are Parquet",
              paths.size(), joined(paths));
  QUILL_CHECK(options.expected_parquet_sha256.empty() && options.expected_parquet_bytes < 0,
              "{}: JSONL input, but {} describes Parquet input (parquet_sha256): give the recipe's Parquet files",
              paths[0], options.expected_from);
  return build_rows_from_jsonl(paths[0], tokenizer, options, out_dir);
}

}  // namespace quill
