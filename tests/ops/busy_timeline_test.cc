#include "ops/busy_timeline.h"

#include <gtest/gtest.h>

#include <random>

namespace quill {
namespace {

TEST(BusyTimeline, MergesOverlappingAndTouchingIntervalsAndIgnoresEmptyOnes) {
  BusyTimeline t({{5, 7}, {0, 2}, {1, 3}, {3, 4}, {6, 6}, {9, 8}});
  ASSERT_EQ(t.merged().size(), 2u);
  EXPECT_EQ(t.merged()[0].begin, 0);
  EXPECT_EQ(t.merged()[0].end, 4);
  EXPECT_EQ(t.merged()[1].begin, 5);
  EXPECT_EQ(t.merged()[1].end, 7);
}

TEST(BusyTimeline, CoveredCountsOnlyTheUnionInsideTheSpan) {
  BusyTimeline t({{0, 2}, {4, 6}, {8, 10}});
  EXPECT_DOUBLE_EQ(t.covered({1, 9}), 1 + 2 + 1);   // ends trimmed on both sides
  EXPECT_DOUBLE_EQ(t.covered({4.5, 5.5}), 1);       // inside one interval
  EXPECT_DOUBLE_EQ(t.covered({2, 4}), 0);           // exactly a gap
  EXPECT_DOUBLE_EQ(t.covered({-5, 20}), 6);         // everything
  EXPECT_DOUBLE_EQ(t.covered({10, 12}), 0);         // after the last
  EXPECT_DOUBLE_EQ(t.covered({3, 3}), 0);           // empty span
  EXPECT_DOUBLE_EQ(BusyTimeline({}).covered({0, 1}), 0);
}

// Against a direct sum over a fine grid of cells, on random intervals with integer ends (exact).
TEST(BusyTimeline, MatchesCountingCellsOnRandomIntervals) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> pos(0, 60), len(0, 9);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<TimeSpan> busy;
    std::vector<bool> cell(80, false);
    const int n = trial % 12;
    for (int i = 0; i < n; ++i) {
      const int b = pos(rng), e = b + len(rng);
      busy.push_back({static_cast<double>(b), static_cast<double>(e)});
      for (int c = b; c < e; ++c) cell[static_cast<size_t>(c)] = true;
    }
    const BusyTimeline t(busy);
    const int sb = pos(rng), se = sb + 1 + len(rng) * 2;
    int expect = 0;
    for (int c = sb; c < se; ++c) expect += cell[static_cast<size_t>(c)];
    EXPECT_DOUBLE_EQ(t.covered({static_cast<double>(sb), static_cast<double>(se)}), expect) << "trial " << trial;
  }
}

}  // namespace
}  // namespace quill
