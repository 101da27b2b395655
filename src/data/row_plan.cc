#include "data/row_plan.h"

#include <algorithm>

#include "base/error.h"

namespace quill {

RowPlanner::RowPlanner(const PackOptions& options, int64_t conversations) : options_(options) {
  QUILL_CHECK(options.row_tokens > 0, "packing: row_tokens must be positive, got {}", options.row_tokens);
  QUILL_CHECK(options.max_rows != 0, "packing: max_rows 0 would keep nothing (use a negative value for no limit)");
  QUILL_CHECK(conversations >= 0, "packing: negative conversation count {}", conversations);
  stats_.conversations = conversations;
  used_.assign(static_cast<size_t>(conversations), 0);
}

void RowPlanner::lay_out(std::span<const int64_t> ks, std::span<const size_t> sizes) {
  QUILL_CHECK(!done(), "packing: a window after max_rows");
  QUILL_CHECK(ks.size() == sizes.size(), "packing: {} conversations but {} sizes", ks.size(), sizes.size());
  const size_t T = static_cast<size_t>(options_.row_tokens);
  window_sizes_.assign(sizes.begin(), sizes.end());
  candidates_.clear();
  pieces_ = carry_pieces_;  // the open row continues where the previous window left it
  open_first_ = 0;
  size_t fill = static_cast<size_t>(fill_);
  for (size_t i = 0; i < ks.size(); ++i) {
    QUILL_CHECK(ks[i] >= 0 && ks[i] < stats_.conversations, "packing: conversation index {} outside [0, {})", ks[i],
                stats_.conversations);
    for (size_t pos = 0; pos < sizes[i];) {
      size_t take = std::min(sizes[i] - pos, T - fill);
      pieces_.push_back({ks[i], static_cast<int32_t>(i), pos, take});
      pos += take;
      fill += take;
      if (fill == T) {
        Candidate c;
        c.first_piece = open_first_;
        c.pieces = pieces_.size() - open_first_;
        c.last_slot = static_cast<int32_t>(i);
        candidates_.push_back(c);
        open_first_ = pieces_.size();
        fill = 0;
      }
    }
  }
  fill_ = static_cast<int64_t>(fill);
}

size_t RowPlanner::decide() {
  size_t taken = window_sizes_.size();
  // RowPacker checks the limit after every completed row; only a kept row can reach it.
  for (Candidate& c : candidates_) {
    if (c.supervised > 0) {
      c.row = stats_.rows++;
      for (size_t p = c.first_piece; p < c.first_piece + c.pieces; ++p) used_[pieces_[p].conversation] = 1;
    } else {
      c.row = -1;
      ++stats_.rows_without_target_skipped;
    }
    if (stats_.rows == options_.max_rows) {
      stats_.stopped_at_max_rows = true;
      taken = static_cast<size_t>(c.last_slot) + 1;  // the conversation being added when it stopped
      break;
    }
  }
  for (size_t i = 0; i < taken; ++i) stats_.stream_tokens += static_cast<int64_t>(window_sizes_[i]);
  return taken;
}

void RowPlanner::end_window(std::span<const MaskedTokens> slots) {
  if (done()) return;
  MaskedTokens next;
  std::vector<Piece> next_pieces;
  next.tokens.reserve(static_cast<size_t>(fill_));
  next.mask.reserve(static_cast<size_t>(fill_));
  for (size_t p = open_first_; p < pieces_.size(); ++p) {
    const Piece& piece = pieces_[p];
    QUILL_CHECK(piece.slot == kCarry || static_cast<size_t>(piece.slot) < slots.size(),
                "packing: piece of slot {} in a window of {}", piece.slot, slots.size());
    const MaskedTokens& src = piece.slot == kCarry ? carry_ : slots[static_cast<size_t>(piece.slot)];
    next_pieces.push_back({piece.conversation, kCarry, next.tokens.size(), piece.length});
    next.tokens.insert(next.tokens.end(), src.tokens.begin() + piece.begin, src.tokens.begin() + piece.begin + piece.length);
    next.mask.insert(next.mask.end(), src.mask.begin() + piece.begin, src.mask.begin() + piece.begin + piece.length);
  }
  QUILL_CHECK(static_cast<int64_t>(next.tokens.size()) == fill_, "packing: the open row holds {} tokens, expected {}",
              next.tokens.size(), fill_);
  carry_ = std::move(next);
  carry_pieces_ = std::move(next_pieces);
}

PackStats RowPlanner::finish() {
  stats_.finish(fill_, used_);
  return stats_;
}

}  // namespace quill
