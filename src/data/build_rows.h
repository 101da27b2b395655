// The SFT data build: conversations -> Inkling rendering and loss mask -> packing -> rows
// directory with its manifest (recipes-and-measurement.md section 6; docs/rows-format.md,
// docs/data-build.md).
//
// Everything whose cost grows with the input runs on all cores (rows_pipeline.h): the permutation
// is fixed first (it depends only on the number of conversations and the seed), then
// conversations are parsed, rendered and tokenized in permutation order, a window at a time in
// parallel, each into its own slot; the rows are laid out from the token counts, assembled and
// written in parallel, and hashed in order on a thread of their own. The output is therefore
// byte-identical whatever the thread count, and a build with --max-rows stops rendering once the
// rows are full. `--timing` (BuildOptions::timing) says where the time went.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/build_timing.h"
#include "data/conversation.h"
#include "data/tokenizer.h"

namespace quill {

struct BuildOptions {
  uint64_t seed = 42;
  int64_t row_tokens = 8192;
  int64_t max_rows = -1;                  // < 0: no limit (of the training rows; the held-out rows have none)
  // `--valid-fraction F`: the last floor(F * conversations) of the seeded permutation are held out
  // and packed, in that order, into out_dir/valid (rows.bin and a manifest of its own); the training
  // rows are packed from the others (docs/data-build.md, "Held-out split"). 0: no split.
  double valid_fraction = 0;
  std::string reasoning_effort = "high";  // see RenderOptions
  std::string source;                     // free text recorded in the manifest ("source")
  int threads = 0;                        // <= 0: all cores
  bool skip_invalid = false;              // JSONL input: skip and count bad lines instead of failing
  bool progress = false;                  // progress display on stderr
  BuildTiming* timing = nullptr;          // where the time goes (--timing); nullptr: not timed
  // Merged into the manifest's "tokenizer" object (tokenizer_source_json: path, special_tokens).
  nlohmann::json tokenizer_source = nlohmann::json::object();
  // Parquet input: what the files must be (a recipe's workload.dataset.build.parquet_sha256 and
  // parquet_bytes; docs/parquet.md, "The recipe's parquet_sha256"). Empty / < 0: not checked.
  // `expected_from` names where the values come from, for the message.
  std::string expected_parquet_sha256;
  int64_t expected_parquet_bytes = -1;
  std::string expected_from;
};

// Throws naming --valid-fraction unless 0 <= fraction < 1 (the CLI checks it before any work).
void check_valid_fraction(double fraction);

// Renders every conversation, packs and writes out_dir/rows.bin and out_dir/manifest.json.
// Returns the manifest: rows, row_tokens, padding_tokens, seed, max_rows, tokenizer {name,
// sha256, vocab_size, [path, special_tokens]}, renderer, renderer_version, template_kwargs,
// supervised_targets, supervised_token_ratio, rows_sha256, max_token_id, conversations {input,
// used, skipped, invalid_skipped}, packing {...}, source.
nlohmann::json build_rows(const std::vector<Conversation>& conversations, const Tokenizer& tokenizer,
                          const BuildOptions& options, const std::string& out_dir);

// The same from a JSONL file, memory-mapped and cut into lines in parallel. Every line is taken
// for valid and parsed once, as it is rendered; lines a --max-rows build never renders are then
// checked (in parallel) before its rows are finished. If any line is invalid (malformed JSON,
// invalid UTF-8, unknown role, missing content, a bad tool spec), the build starts over in two
// passes: every line checked first (in parallel), then the valid ones rendered. A bad line is an
// error naming the file and line (the first bad line of the file, whatever the thread count), or
// with skip_invalid is skipped and counted (conversations.invalid_skipped). Blank lines are
// ignored. The manifest also gets input {path, bytes, lines}. The rows are written under
// temporary names and renamed at the end, so a failed build leaves no rows file.
nlohmann::json build_rows_from_jsonl(const std::string& path, const Tokenizer& tokenizer, const BuildOptions& options,
                                     const std::string& out_dir);

// The same from Parquet files (docs/parquet.md), read in order as one list of conversations:
// rendered exactly as build_rows_from_jsonl renders the same conversations, so the rows and the
// manifest equal those of a JSONL build except `input` (here {format: "parquet", files: [{path,
// bytes, rows, row_groups}], bytes, rows, parquet_sha256}) and `source`. The files' SHA-256
// (over their bytes, concatenated in order) is checked against options.expected_parquet_sha256
// before anything is rendered. An invalid conversation is an error naming the file and row, or
// with skip_invalid is skipped and counted (conversations.invalid_skipped).
nlohmann::json build_rows_from_parquet(const std::vector<std::string>& paths, const Tokenizer& tokenizer,
                                       const BuildOptions& options, const std::string& out_dir);

// What `quill data build --input` does: Parquet when the files start with the magic PAR1 (or are
// named *.parquet, which then must be Parquet), else one JSONL file. Mixed inputs, several JSONL
// files, and a Parquet expectation (expected_parquet_sha256) on JSONL input are refused.
nlohmann::json build_rows_from_inputs(const std::vector<std::string>& paths, const Tokenizer& tokenizer,
                                      const BuildOptions& options, const std::string& out_dir);

// Checks one JSONL line and returns its conversation; errors are prefixed with `where`
// ("file:line"). Used by the build and its tests.
Conversation parse_conversation_line(std::string_view line, const std::string& where);

}  // namespace quill
