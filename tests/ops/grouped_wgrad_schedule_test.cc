// The tile walk of the experts' weight-gradient kernel (src/ops/cuda/grouped_wgrad_schedule.h) without a GPU: the
// producer's cursor names the same (tile, stage) as the consumers at every step of every CTA (else the kernel would
// multiply one stage's rows as another's), every tile of every expert with rows is walked by exactly one CTA, its
// stages cover the expert's rows exactly once, and the tiles of one expert cover its gradient exactly once. And the
// staging layout: the accumulators of the 256 threads fill the staging (128 KiB at 256 columns, 64 KiB at 128)
// exactly once, each float where TMA's 128-byte swizzle keeps its tile element (derived here from the swizzle's
// definition, not from swizzle128). Both of the kernel's forms (tile widths 256 and 128).
#include "ops/cuda/grouped_wgrad_schedule.h"
#include "ops/grouped_wgrad_host_grid.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace quill::cuda::grouped_wgrad {
namespace {

using test::HostGrid;

// counts_b: the second source's rows per expert (empty: one source).
template <int kN>
void check_walk(const std::vector<int>& counts, int tiles_m, int tiles_n, int grid,
                const std::vector<int>& counts_b = {}) {
  SCOPED_TRACE("width " + std::to_string(kN) + ", experts " + std::to_string(counts.size()) + ", tiles " +
               std::to_string(tiles_m) + " x " + std::to_string(tiles_n) + ", grid " + std::to_string(grid) +
               (counts_b.empty() ? ", one source" : ", two sources"));
  const int E = static_cast<int>(counts.size());
  std::vector<int> offset(E + 1, 0), offset_b(E + 1, 0);
  for (int e = 0; e < E; ++e) offset[e + 1] = offset[e] + counts[e];
  for (int e = 0; e < E && !counts_b.empty(); ++e) offset_b[e + 1] = offset_b[e] + counts_b[e];
  const HostGrid g{offset.data(), !counts_b.empty(), offset_b.data(), tiles_m, tiles_n};
  auto rows_b = [&](int e) { return counts_b.empty() ? 0 : counts_b[e]; };
  const int total = E * tiles_m * tiles_n;
  std::set<int> walked;
  std::vector<std::set<std::pair<int, int>>> blocks(E);  // (m0, n0) per expert
  for (int b = 0; b < grid; ++b) {
    // The consumers' order (the kernel's tile loop).
    std::vector<std::pair<int, int>> consumed;
    for (int t = b; t < total; t += grid) {
      const Tile x = tile_at<kN>(g, t);
      ASSERT_LT(x.e, E);
      EXPECT_TRUE(blocks[x.e].insert({x.m0, x.n0}).second) << "tile " << t << " repeats a block of expert " << x.e;
      EXPECT_EQ(x.row0, offset[x.e]);
      EXPECT_EQ(x.rows, counts[x.e]);
      EXPECT_EQ(x.rows_b, rows_b(x.e));
      if (!counts_b.empty()) {
        EXPECT_EQ(x.row0_b, offset_b[x.e]);
      }
      if (x.rows + x.rows_b == 0) {
        EXPECT_EQ(stage_count(x), 0);
        continue;
      }
      EXPECT_TRUE(walked.insert(t).second) << "tile " << t << " walked twice";
      // The stages read the first source's rows of the expert, then the second's, each row once, in order.
      int covered[2] = {0, 0};
      const int total_rows[2] = {x.rows, x.rows_b}, first_row[2] = {x.row0, x.row0_b};
      for (int kt = 0; kt < stage_count(x); ++kt) {
        consumed.push_back({t, kt});
        const StageRows r = stage_rows(x, kt);
        ASSERT_TRUE(r.source == 0 || r.source == 1);
        if (r.source == 1) {
          EXPECT_EQ(covered[0], x.rows) << "a second-source stage before the first source's end";
        }
        EXPECT_EQ(r.row, first_row[r.source] + covered[r.source]);
        EXPECT_GT(r.valid, 0);
        EXPECT_LE(r.valid, static_cast<int>(kTileRows));
        covered[r.source] += r.valid;
        if (r.valid < kTileRows) {
          EXPECT_EQ(covered[r.source], total_rows[r.source]) << "a partial stage not last";
        }
      }
      EXPECT_EQ(covered[0], x.rows) << "the stages of tile " << t << " do not cover its expert's rows";
      EXPECT_EQ(covered[1], x.rows_b) << "the stages of tile " << t << " do not cover its expert's second rows";
    }
    // The producer's order (its cursor from {b, -1}).
    std::vector<std::pair<int, int>> loaded;
    Cursor c{b, -1};
    for (advance<kN>(g, total, grid, c); c.t < total; advance<kN>(g, total, grid, c)) loaded.push_back({c.t, c.kt});
    EXPECT_EQ(loaded, consumed) << "CTA " << b << ": the producer's loads and the consumers' stages differ";
  }
  for (int e = 0; e < E; ++e) {
    EXPECT_EQ(static_cast<int>(blocks[e].size()), tiles_m * tiles_n) << "expert " << e;
    for (const auto& [m0, n0] : blocks[e]) {
      EXPECT_EQ(m0 % kTileM, 0);
      EXPECT_LT(m0, tiles_m * kTileM);
      EXPECT_EQ(n0 % kN, 0);
      EXPECT_LT(n0, tiles_n * kN);
    }
  }
  int with_rows = 0;
  for (int e = 0; e < E; ++e) with_rows += counts[e] + rows_b(e) > 0 ? tiles_m * tiles_n : 0;
  EXPECT_EQ(static_cast<int>(walked.size()), with_rows);
}

template <int kN>
void check_walks() {
  // Empty experts first, between and last; row counts around the stage; a seed rank's 32 x ~384 on 132 CTAs.
  check_walk<kN>({0, 100, 64, 1, 0, 200, 63, 65, 0}, 2, 2, 3);
  check_walk<kN>({384, 384, 384, 384}, 1, 1, 4);
  check_walk<kN>({5}, 3, 3, 132);
  check_walk<kN>({0, 0}, 1, 1, 2);
  check_walk<kN>({0, 0, 7}, 2, 1, 1);
  std::vector<int> seed(32);
  for (int e = 0; e < 32; ++e) seed[e] = 364 + (e * 37) % 41;  // 364 .. 404 rows
  seed[5] = 1, seed[9] = 0;                                     // a nearly idle and an idle expert
  check_walk<kN>(seed, 32, 4096 / kN, 132);                     // gate/up: 4,096 x 4,096 per expert
  check_walk<kN>(seed, 32, 2048 / kN, 132);                     // down: 4,096 x 2,048
  // Two sources (two micro-batches' rows): empty in either, both, partial stages in each.
  check_walk<kN>({0, 100, 64, 1, 0, 200, 63, 65, 0}, 2, 2, 3, {5, 0, 64, 0, 0, 130, 1, 63, 0});
  check_walk<kN>({0, 0}, 1, 1, 2, {0, 0});
  check_walk<kN>({0, 7}, 1, 2, 1, {9, 0});
  std::vector<int> seed_b(32);
  for (int e = 0; e < 32; ++e) seed_b[e] = 350 + (e * 53) % 71;
  seed_b[9] = 0;  // idle in both micro-batches
  check_walk<kN>(seed, 32, 4096 / kN, 132, seed_b);
}

TEST(GroupedWgradSchedule, TheProducerLoadsWhatTheConsumersTakeAndEveryTileOnce) {
  check_walks<static_cast<int>(kTileN)>();
  check_walks<static_cast<int>(kPingpongTileN)>();  // Form::kPingpong's 128-column tiles
}

template <int kN>
void check_staging() {
  SCOPED_TRACE("width " + std::to_string(kN));
  const int kBytes = staging_boxes(kN) * kStagingBoxBytes;
  ASSERT_EQ(kBytes, 128 * kN * 4);
  std::vector<int> hits(kBytes / 4, 0);
  for (int w = 0; w < 2; ++w)
    for (int warp = 0; warp < 4; ++warp)
      for (int lane = 0; lane < 32; ++lane)
        for (int j = 0; j < kN / 8; ++j)
          for (int sel = 0; sel < 2; ++sel) {
            const int g = lane / 4, cq = lane % 4;
            const uint32_t at = staging_byte(w, warp, g, cq, j, sel);
            ASSERT_EQ(at % 8, 0u) << "a pair is one 8-byte shared-memory access";
            for (int k = 0; k < 2; ++k) {
              // wgmma's accumulator layout: row 16 warp + g + 8 sel of the warpgroup's 64, column 8 j + 2 cq + k.
              const int row = 64 * w + 16 * warp + g + 8 * sel, col = 8 * j + 2 * cq + k;
              // TMA SWIZZLE_128B in box col / 32: row-major 128-byte rows, the 16-byte chunk index XOR (row mod 8).
              const int in_row = (col % 32) * 4;
              const int want = (col / 32) * (128 * 128) + row * 128 + (((in_row / 16) ^ (row % 8)) * 16) + in_row % 16;
              ASSERT_EQ(static_cast<int>(at) + 4 * k, want) << "row " << row << " column " << col;
              ASSERT_LT(static_cast<int>(at) + 4 * k, kBytes);
              ++hits[(at + 4 * k) / 4];
            }
          }
  for (size_t i = 0; i < hits.size(); ++i) ASSERT_EQ(hits[i], 1) << "staging float " << i;
}

// The kernel stages its 256 columns in parts (grouped_wgrad_wg.cu): halves of 128 (Form::kHalf), each half's
// column groups j = 0 .. 15 at staging_byte(.., j, ..), or quarters of 64 (Form::kQuarter, j = 0 .. 7; and
// Form::kPingpong's halves of its 128-column tile, a warpgroup's two row halves in place of the two warpgroups): those
// stagings are the ones the kernels fill; the whole tile's is checked too.
TEST(GroupedWgradSchedule, TheAccumulatorsFillTheStagingOnceWhereTheTmaKeepsEachElement) {
  check_staging<static_cast<int>(kTileN) / 2>();
  check_staging<static_cast<int>(kTileN) / 4>();
  check_staging<static_cast<int>(kTileN)>();
}

}  // namespace
}  // namespace quill::cuda::grouped_wgrad
