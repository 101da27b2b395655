// The SFT data build: conversations -> Inkling rendering and loss mask -> packing -> rows
// directory with its manifest (recipes-and-measurement.md section 6; docs/rows-format.md).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/conversation.h"
#include "data/tokenizer.h"

namespace quill {

struct BuildOptions {
  uint64_t seed = 42;
  int64_t row_tokens = 8192;
  int64_t max_rows = -1;                  // < 0: no limit
  std::string reasoning_effort = "high";  // see RenderOptions
  std::string source;                     // free text recorded in the manifest ("source")
};

// Renders every conversation, packs and writes out_dir/rows.bin and out_dir/manifest.json.
// Returns the manifest: rows, row_tokens, padding_tokens, seed, max_rows, tokenizer {name,
// sha256, vocab_size}, renderer, renderer_version, template_kwargs, supervised_targets,
// supervised_token_ratio, rows_sha256, max_token_id, conversations {input, used, skipped},
// packing {...}, source.
nlohmann::json build_rows(const std::vector<Conversation>& conversations, const Tokenizer& tokenizer,
                          const BuildOptions& options, const std::string& out_dir);

}  // namespace quill
