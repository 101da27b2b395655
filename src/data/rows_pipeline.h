// The data build's engine (docs/data-build.md, "How it runs"). The permutation is fixed first
// (it depends only on the number of conversations and the seed); then, a window of conversations
// at a time in permutation order:
//   render    every conversation of the window into its own slot, on all threads;
//   lay out   the window's tokens into candidate rows (row_plan.h; serial, O(conversations));
//   assemble  each candidate row from its pieces, count its targets, on all threads;
//   decide    which rows are kept and their indices (serial, O(rows));
//   write     the kept rows at their offsets (rows_parallel_writer.h) and hash them into
//   + hash    rows_sha256, in order, on a thread of its own while the pool renders the next
//             window (sha256_stream.h). The hash is inherently serial, and so are the writes
//             (a file's page cache takes one buffered writer at a time), so both are overlapped
//             rather than split.
// Windows shrink towards the end so that the last window's writes and hash, which nothing
// overlaps, are short. The bytes written depend only on the conversations, tokenizer and
// options, never on the thread count; they are those of RowPacker + RowsWriter (packing.h,
// rows.h).
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <span>
#include <string>

#include "data/build_rows.h"
#include "data/chat_render.h"
#include "data/masked_tokens.h"
#include "base/thread_pool.h"

namespace quill {

struct RowsSource {
  int64_t conversations = 0;
  // Renders conversation k (its index before the permutation) into `out`; called on the pool's
  // threads, any number at once.
  std::function<void(int64_t k, MaskedTokens& out)> render;
  // Conversation k's input bytes, for the progress display.
  std::function<int64_t(int64_t k)> bytes;
  // Optional: called on the calling thread after each window has rendered; may throw to abandon
  // the build (nothing is left behind).
  std::function<void()> after_window;
  // Optional: called before the rows are finished with the conversations (in permutation order)
  // that were never rendered because max_rows was reached; may throw likewise.
  std::function<void(std::span<const int64_t> unrendered)> before_finish;
};

// The held-out split's directory inside a rows directory (BuildOptions::valid_fraction).
inline constexpr const char* kValidSplitDir = "valid";

// How many of `conversations` --valid-fraction holds out: floor(fraction x conversations). Throws naming
// the flag unless 0 <= fraction < 1.
int64_t held_out_conversations(int64_t conversations, double valid_fraction);

// Renders, packs and writes out_dir/rows.bin and manifest.json; returns the manifest. With
// options.valid_fraction, the held-out conversations go to out_dir/valid (rows.bin and a manifest with
// "split" {role "validation", ...}) and the training manifest's "split" names them. `extras`
// (an object) holds "invalid_skipped" and whatever else the manifest gets besides the fields
// this adds (tokenizer, renderer, template_kwargs, source, seed, max_rows, the PackStats fields,
// and the writer's computed fields).
nlohmann::json build_rows_from_source(const RowsSource& source, const ChatRenderer& renderer,
                                      const BuildOptions& options, const std::string& out_dir, nlohmann::json extras,
                                      ThreadPool& pool);

}  // namespace quill
