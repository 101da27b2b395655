// Packing rendered conversations into SFT rows (recipes-and-measurement.md section 6).
//
// 1. Order: a Fisher-Yates permutation driven by SplitMix64(seed) (base/rng.h):
//      perm = [0, 1, ..., n-1]
//      for i = n-1 down to 1: j = rng.below(i + 1); swap(perm[i], perm[j])
//    where below() is Lemire's unbiased multiply-shift with rejection. Conversations are then
//    taken in the order perm[0], perm[1], ..., perm[n-1].
// 2. Their tokens (and mask bits) are concatenated in that order without any separator.
// 3. The stream is cut into consecutive rows of exactly row_tokens tokens; the tail shorter than a
//    row is dropped. No padding.
// 4. A row without a single supervised target (mask[t] == 1 for some t in 1..T-1) is skipped.
// 5. Packing stops once max_rows rows are kept (max_rows < 0: no limit).
// Pure and deterministic: the same conversations and options give the same rows.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/masked_tokens.h"
#include "data/rows.h"

namespace quill {

// The permutation of step 1.
std::vector<int64_t> fisher_yates_permutation(int64_t n, uint64_t seed);

struct PackOptions {
  uint64_t seed = 42;
  int64_t row_tokens = 8192;
  int64_t max_rows = -1;  // < 0: no limit; 0 is an error
};

struct PackStats {
  int64_t rows = 0;                        // rows kept (written)
  int64_t conversations = 0;               // input conversations
  int64_t conversations_used = 0;          // with at least one token in a kept row
  int64_t conversations_skipped = 0;       // the others (dropped tail, skipped rows, past max_rows, empty)
  int64_t stream_tokens = 0;               // tokens of the conversations taken (all, unless stopped at max_rows)
  int64_t rows_without_target_skipped = 0;
  int64_t tail_tokens_dropped = 0;         // tokens after the last full row (0 when stopped by max_rows)
  bool stopped_at_max_rows = false;

  // {"conversations": {"input", "used", "skipped"}, "packing": {...}} for the manifest.
  nlohmann::json to_manifest() const;
  // The last fields, once packing ends: `fill` tokens in the open row, used[i] != 0 for each conversation
  // with a token in a kept row (RowPacker and the data build's RowPlanner share this).
  void finish(int64_t fill, const std::vector<char>& used);
};

// The streaming form of steps 2-5: conversations are added one at a time in the permuted order,
// so a build can render them lazily and stop rendering at max_rows. pack_rows is this over a
// vector.
class RowPacker {
 public:
  // `conversations`: how many the permutation holds (for the stats). writer.row_tokens() must
  // equal options.row_tokens.
  RowPacker(const PackOptions& options, RowsWriter& writer, int64_t conversations);
  // Adds conversation `index` (its index before the permutation, for the stats). Returns false
  // once max_rows rows are kept: nothing more is taken.
  bool add(const MaskedTokens& c, int64_t index);
  bool done() const { return stats_.stopped_at_max_rows; }
  int64_t rows() const { return stats_.rows; }
  // The stats; call once, after the last add.
  PackStats finish();

 private:
  PackOptions options_;
  RowsWriter& writer_;
  PackStats stats_;
  std::vector<uint32_t> row_tokens_;
  std::vector<uint8_t> row_mask_;
  std::vector<char> used_;
  std::vector<int64_t> in_row_;  // conversations with a token in the row being filled
  int64_t fill_ = 0;
};

// Packs into `writer` (appends rows; the caller finishes it). writer.row_tokens() must equal
// options.row_tokens.
PackStats pack_rows(const std::vector<MaskedTokens>& conversations, const PackOptions& options, RowsWriter& writer);

// Packs into a new rows directory and writes it. The manifest gets `manifest_extras` (an object)
// plus seed and the PackStats fields. Zero kept rows is an error (nothing to train on).
nlohmann::json write_packed_rows(const std::string& out_dir, const std::vector<MaskedTokens>& conversations,
                                 const PackOptions& options, const nlohmann::json& manifest_extras);

}  // namespace quill
