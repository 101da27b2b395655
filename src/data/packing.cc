#include "data/packing.h"

#include <algorithm>
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

RowPacker::RowPacker(const PackOptions& options, RowsWriter& writer, int64_t conversations)
    : options_(options), writer_(writer) {
  const int64_t T = options.row_tokens;
  QUILL_CHECK(T > 0, "packing: row_tokens must be positive, got {}", T);
  QUILL_CHECK(writer.row_tokens() == T, "packing: the writer holds rows of {} tokens, options say {}",
              writer.row_tokens(), T);
  QUILL_CHECK(options.max_rows != 0, "packing: max_rows 0 would keep nothing (use a negative value for no limit)");
  QUILL_CHECK(conversations >= 0, "packing: negative conversation count {}", conversations);
  stats_.conversations = conversations;
  row_tokens_.resize(T);
  row_mask_.resize(T);
  used_.assign(static_cast<size_t>(conversations), 0);
}

bool RowPacker::add(const MaskedTokens& c, int64_t k) {
  if (stats_.stopped_at_max_rows) return false;
  QUILL_CHECK(k >= 0 && k < stats_.conversations, "packing: conversation index {} outside [0, {})", k,
              stats_.conversations);
  QUILL_CHECK(c.tokens.size() == c.mask.size(), "packing: conversation {} has {} tokens but {} mask bits", k,
              c.tokens.size(), c.mask.size());
  const int64_t T = options_.row_tokens;
  stats_.stream_tokens += static_cast<int64_t>(c.tokens.size());
  size_t pos = 0;
  while (pos < c.tokens.size() && !stats_.stopped_at_max_rows) {
    if (in_row_.empty() || in_row_.back() != k) in_row_.push_back(k);
    size_t take = std::min<size_t>(c.tokens.size() - pos, static_cast<size_t>(T - fill_));
    std::copy_n(c.tokens.begin() + pos, take, row_tokens_.begin() + fill_);
    std::copy_n(c.mask.begin() + pos, take, row_mask_.begin() + fill_);
    pos += take;
    fill_ += static_cast<int64_t>(take);
    if (fill_ < T) continue;
    if (count_supervised_targets(row_mask_) > 0) {
      writer_.append(row_tokens_, row_mask_);
      ++stats_.rows;
      for (int64_t u : in_row_) used_[u] = 1;
    } else {
      ++stats_.rows_without_target_skipped;
    }
    in_row_.clear();
    fill_ = 0;
    stats_.stopped_at_max_rows = stats_.rows == options_.max_rows;
  }
  return !stats_.stopped_at_max_rows;
}

void PackStats::finish(int64_t fill, const std::vector<char>& used) {
  tail_tokens_dropped = stopped_at_max_rows ? 0 : fill;
  conversations_used = 0;
  for (char u : used) conversations_used += u;
  conversations_skipped = conversations - conversations_used;
}

PackStats RowPacker::finish() {
  stats_.finish(fill_, used_);
  return stats_;
}

PackStats pack_rows(const std::vector<MaskedTokens>& conversations, const PackOptions& options, RowsWriter& writer) {
  RowPacker packer(options, writer, static_cast<int64_t>(conversations.size()));
  for (size_t i = 0; i < conversations.size(); ++i) {
    QUILL_CHECK(conversations[i].tokens.size() == conversations[i].mask.size(),
                "packing: conversation {} has {} tokens but {} mask bits", i, conversations[i].tokens.size(),
                conversations[i].mask.size());
  }
  for (int64_t k : fisher_yates_permutation(static_cast<int64_t>(conversations.size()), options.seed)) {
    if (!packer.add(conversations[k], k)) break;
  }
  return packer.finish();
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
