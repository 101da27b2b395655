#include "data/packing.h"

#include <utility>

#include "base/error.h"
#include "base/rng.h"

namespace quill {

std::vector<int64_t> fisher_yates_permutation(int64_t n, uint64_t seed) {
  QUILL_CHECK(n >= 0, "fisher_yates_permutation: negative n {}", n);
  std::vector<int64_t> perm(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) perm[i] = i;
  SplitMix64 rng(seed);
  for (int64_t i = n - 1; i >= 1; --i) {
    int64_t j = static_cast<int64_t>(rng.below(static_cast<uint64_t>(i + 1)));
    std::swap(perm[i], perm[j]);
  }
  return perm;
}

nlohmann::json PackStats::to_manifest() const {
  return {{"conversations", {{"input", conversations}, {"used", conversations_used}, {"skipped", conversations_skipped}}},
          {"packing",
           {{"stream_tokens", stream_tokens},
            {"rows_without_target_skipped", rows_without_target_skipped},
            {"tail_tokens_dropped", tail_tokens_dropped},
            {"stopped_at_max_rows", stopped_at_max_rows}}}};
}

PackStats pack_rows(const std::vector<MaskedTokens>& conversations, const PackOptions& options, RowsWriter& writer) {
  const int64_t T = options.row_tokens;
  QUILL_CHECK(T > 0, "packing: row_tokens must be positive, got {}", T);
  QUILL_CHECK(writer.row_tokens() == T, "packing: the writer holds rows of {} tokens, options say {}",
              writer.row_tokens(), T);
  QUILL_CHECK(options.max_rows != 0, "packing: max_rows 0 would keep nothing (use a negative value for no limit)");
  for (size_t i = 0; i < conversations.size(); ++i) {
    QUILL_CHECK(conversations[i].tokens.size() == conversations[i].mask.size(),
                "packing: conversation {} has {} tokens but {} mask bits", i, conversations[i].tokens.size(),
                conversations[i].mask.size());
  }

  PackStats stats;
  stats.conversations = static_cast<int64_t>(conversations.size());
  for (const MaskedTokens& c : conversations) stats.stream_tokens += static_cast<int64_t>(c.tokens.size());

  std::vector<uint32_t> row_tokens(T);
  std::vector<uint8_t> row_mask(T);
  std::vector<char> used(conversations.size(), 0);
  std::vector<int64_t> in_row;  // conversations with a token in the row being filled
  int64_t fill = 0;

  for (int64_t k : fisher_yates_permutation(stats.conversations, options.seed)) {
    if (stats.stopped_at_max_rows) break;
    const MaskedTokens& c = conversations[k];
    size_t pos = 0;
    while (pos < c.tokens.size() && !stats.stopped_at_max_rows) {
      if (in_row.empty() || in_row.back() != k) in_row.push_back(k);
      size_t take = std::min<size_t>(c.tokens.size() - pos, static_cast<size_t>(T - fill));
      std::copy_n(c.tokens.begin() + pos, take, row_tokens.begin() + fill);
      std::copy_n(c.mask.begin() + pos, take, row_mask.begin() + fill);
      pos += take;
      fill += static_cast<int64_t>(take);
      if (fill < T) continue;
      if (count_supervised_targets(row_mask) > 0) {
        writer.append(row_tokens, row_mask);
        ++stats.rows;
        for (int64_t u : in_row) used[u] = 1;
      } else {
        ++stats.rows_without_target_skipped;
      }
      in_row.clear();
      fill = 0;
      stats.stopped_at_max_rows = stats.rows == options.max_rows;
    }
  }
  stats.tail_tokens_dropped = stats.stopped_at_max_rows ? 0 : fill;
  for (char u : used) stats.conversations_used += u;
  stats.conversations_skipped = stats.conversations - stats.conversations_used;
  return stats;
}

nlohmann::json write_packed_rows(const std::string& out_dir, const std::vector<MaskedTokens>& conversations,
                                 const PackOptions& options, const nlohmann::json& manifest_extras) {
  QUILL_CHECK(manifest_extras.is_object(), "{}: manifest extras must be a JSON object", out_dir);
  RowsWriter writer(out_dir, options.row_tokens);
  PackStats stats = pack_rows(conversations, options, writer);
  QUILL_CHECK(stats.rows > 0,
              "{}: no rows: {} conversations give {} tokens, which make no row of {} tokens with a supervised target",
              out_dir, stats.conversations, stats.stream_tokens, options.row_tokens);
  nlohmann::json extras = manifest_extras;
  extras["seed"] = options.seed;
  extras["max_rows"] = options.max_rows;
  extras.update(stats.to_manifest());
  return writer.finish(extras);
}

}  // namespace quill
