// packing.h's steps 2-5 (concatenate the conversations in the permuted order, cut rows of T
// tokens, skip rows without a supervised target, stop at max_rows) split so that the data build
// can copy, check and write the rows on all threads. Only the bookkeeping is serial, and it costs
// O(conversations + rows), not O(tokens). Same rows and PackStats as RowPacker (packing.h), which
// tests/data/row_plan_test.cc checks on random conversations.
//
// The build feeds the conversations a window at a time (rendered, in permutation order):
//   1. lay_out(): cuts the window's tokens into candidate rows, each a list of pieces of
//      conversations; the first may continue the partial row the previous window left, which is
//      kept in a carry buffer.
//   2. the caller assembles every candidate row from its pieces and counts its supervised targets
//      (Candidate::supervised), in parallel;
//   3. decide(): keeps or skips each candidate in order, stops at max_rows, numbers the kept rows
//      (Candidate::row) and counts the stats;
//   4. the caller writes the kept rows, in parallel;
//   5. end_window(): copies the new partial row into the carry buffer (fewer than T tokens).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "data/masked_tokens.h"
#include "data/packing.h"

namespace quill {

class RowPlanner {
 public:
  static constexpr int32_t kCarry = -1;  // a piece of the carry buffer

  struct Piece {
    int64_t conversation;  // its index before the permutation
    int32_t slot;          // the window's slot it comes from, or kCarry
    size_t begin, length;  // tokens of that slot (or of the carry buffer)
  };
  struct Candidate {
    size_t first_piece = 0, pieces = 0;
    int32_t last_slot = 0;   // the slot whose tokens complete the row
    int64_t supervised = 0;  // step 2: mask[t] == 1 for t in 1..T-1
    int64_t row = -1;        // step 3: the row's index, or -1 (skipped, or past max_rows)
  };

  // `conversations`: how many the permutation holds. Checks the options as RowPacker does.
  RowPlanner(const PackOptions& options, int64_t conversations);

  // Step 1. The window's slot i holds conversation ks[i] with sizes[i] tokens.
  void lay_out(std::span<const int64_t> ks, std::span<const size_t> sizes);
  std::vector<Candidate>& candidates() { return candidates_; }
  const std::vector<Piece>& pieces() const { return pieces_; }
  const MaskedTokens& carry() const { return carry_; }
  // Step 3. Returns how many of the window's slots were taken: all, or up to and including the
  // one that completed the max_rows-th row.
  size_t decide();
  // Step 5. `slots`: the window's rendered conversations (their tokens are copied, not kept).
  void end_window(std::span<const MaskedTokens> slots);

  bool done() const { return stats_.stopped_at_max_rows; }
  int64_t rows() const { return stats_.rows; }
  // The stats; call once, after the last window.
  PackStats finish();

 private:
  PackOptions options_;
  PackStats stats_;
  std::vector<char> used_;
  std::vector<Piece> pieces_;          // the window's pieces: complete rows, then the open one
  std::vector<Candidate> candidates_;  // the window's complete rows
  size_t open_first_ = 0;              // the open row's first piece
  int64_t fill_ = 0;                   // tokens in the open row
  std::vector<size_t> window_sizes_;
  MaskedTokens carry_;                 // the open row's tokens after end_window()
  std::vector<Piece> carry_pieces_;    // and its pieces, as pieces of carry_
};

}  // namespace quill
