// RowPlanner (the data build's packing, windows of conversations, rows assembled by the caller)
// gives exactly RowPacker's rows and stats: random conversations with empty ones, long ones
// spanning several rows and windows, rows without a supervised target, and max_rows.
#include <gtest/gtest.h>

#include <random>

#include "data/packing.h"
#include "data/row_plan.h"
#include "data/rows.h"
#include "data_test_util.h"

namespace quill {
namespace {

using test::TempDir;

struct Row {
  std::vector<uint32_t> tokens;
  std::vector<uint8_t> mask;
  bool operator==(const Row&) const = default;
};

std::vector<MaskedTokens> random_conversations(std::mt19937& rng, size_t n, size_t T) {
  std::vector<MaskedTokens> out(n);
  for (size_t k = 0; k < n; ++k) {
    // Mostly short, some empty, some several rows long; masks in runs, some all zero.
    size_t len = rng() % 8 == 0 ? 0 : rng() % 5 == 0 ? rng() % (3 * T) : rng() % (T / 2 + 1);
    bool unsupervised = rng() % 4 == 0;
    for (size_t t = 0; t < len; ++t) {
      out[k].tokens.push_back(static_cast<uint32_t>(1000 * k + t));
      out[k].mask.push_back(!unsupervised && (t / 3) % 2 == 1);
    }
  }
  return out;
}

// RowPacker's rows, through the real writer, and its stats.
std::pair<std::vector<Row>, PackStats> packer_rows(const std::vector<MaskedTokens>& convs, const PackOptions& o) {
  TempDir tmp;
  RowsWriter writer(tmp.sub("rows"), o.row_tokens);
  PackStats stats = pack_rows(convs, o, writer);
  std::vector<Row> rows;
  if (stats.rows > 0) {
    writer.finish(nlohmann::json::object());
    RowsReader r = RowsReader::open(tmp.sub("rows"));
    for (int64_t i = 0; i < r.rows(); ++i) {
      rows.push_back({{r.tokens(i), r.tokens(i) + o.row_tokens}, {r.mask(i), r.mask(i) + o.row_tokens}});
    }
  }
  return {rows, stats};
}

// The planner as the build drives it, windows of `window` conversations in permutation order.
std::pair<std::vector<Row>, PackStats> planner_rows(const std::vector<MaskedTokens>& convs, const PackOptions& o,
                                                    size_t window) {
  const size_t T = static_cast<size_t>(o.row_tokens);
  RowPlanner planner(o, static_cast<int64_t>(convs.size()));
  std::vector<int64_t> perm = fisher_yates_permutation(static_cast<int64_t>(convs.size()), o.seed);
  std::vector<Row> rows;
  for (size_t start = 0; start < perm.size() && !planner.done(); start += window) {
    size_t count = std::min(window, perm.size() - start);
    std::vector<MaskedTokens> slots;
    std::vector<size_t> sizes;
    for (size_t i = 0; i < count; ++i) {
      slots.push_back(convs[perm[start + i]]);
      sizes.push_back(slots.back().tokens.size());
    }
    planner.lay_out({perm.data() + start, count}, sizes);
    std::vector<Row> candidates;
    for (RowPlanner::Candidate& c : planner.candidates()) {
      Row row;
      for (size_t p = c.first_piece; p < c.first_piece + c.pieces; ++p) {
        const RowPlanner::Piece& piece = planner.pieces()[p];
        const MaskedTokens& src = piece.slot == RowPlanner::kCarry ? planner.carry() : slots[piece.slot];
        row.tokens.insert(row.tokens.end(), src.tokens.begin() + piece.begin,
                          src.tokens.begin() + piece.begin + piece.length);
        row.mask.insert(row.mask.end(), src.mask.begin() + piece.begin, src.mask.begin() + piece.begin + piece.length);
      }
      EXPECT_EQ(row.tokens.size(), T);
      c.supervised = count_supervised_targets(row.mask);
      candidates.push_back(row);
    }
    planner.decide();
    for (size_t c = 0; c < candidates.size(); ++c) {
      int64_t r = planner.candidates()[c].row;
      if (r < 0) continue;
      EXPECT_EQ(r, static_cast<int64_t>(rows.size()));
      rows.push_back(candidates[c]);
    }
    planner.end_window(slots);
  }
  return {rows, planner.finish()};
}

void expect_same_stats(const PackStats& a, const PackStats& b, const std::string& what) {
  EXPECT_EQ(a.rows, b.rows) << what;
  EXPECT_EQ(a.conversations, b.conversations) << what;
  EXPECT_EQ(a.conversations_used, b.conversations_used) << what;
  EXPECT_EQ(a.conversations_skipped, b.conversations_skipped) << what;
  EXPECT_EQ(a.stream_tokens, b.stream_tokens) << what;
  EXPECT_EQ(a.rows_without_target_skipped, b.rows_without_target_skipped) << what;
  EXPECT_EQ(a.tail_tokens_dropped, b.tail_tokens_dropped) << what;
  EXPECT_EQ(a.stopped_at_max_rows, b.stopped_at_max_rows) << what;
}

TEST(RowPlan, SameRowsAndStatsAsRowPacker) {
  std::mt19937 rng(5);
  int compared = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const size_t T = std::vector<size_t>{1, 2, 7, 16, 64}[trial % 5];
    std::vector<MaskedTokens> convs = random_conversations(rng, 1 + rng() % 200, T);
    for (int64_t max_rows : {int64_t{-1}, int64_t{1}, int64_t{3}, int64_t{17}}) {
      PackOptions o{static_cast<uint64_t>(trial), static_cast<int64_t>(T), max_rows};
      auto [want, want_stats] = packer_rows(convs, o);
      for (size_t window : {size_t{1}, size_t{3}, size_t{64}, size_t{1000}}) {
        std::string what = fmt::format("trial {} T {} max_rows {} window {}", trial, T, max_rows, window);
        auto [got, got_stats] = planner_rows(convs, o, window);
        EXPECT_TRUE(got == want) << what << ": " << got.size() << " rows, want " << want.size();
        expect_same_stats(got_stats, want_stats, what);
        ++compared;
      }
    }
  }
  EXPECT_EQ(compared, 60 * 4 * 4);
}

TEST(RowPlan, ChecksItsOptions) {
  test::expect_error([] { RowPlanner({1, 0, -1}, 3); }, {"row_tokens must be positive"});
  test::expect_error([] { RowPlanner({1, 4, 0}, 3); }, {"max_rows 0"});
  RowPlanner planner({1, 4, -1}, 3);
  std::vector<int64_t> ks = {5};
  std::vector<size_t> sizes = {2};
  test::expect_error([&] { planner.lay_out(ks, sizes); }, {"conversation index 5 outside [0, 3)"});
}

}  // namespace
}  // namespace quill
