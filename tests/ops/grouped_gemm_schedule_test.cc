// The tile schedule of the grouped wgmma GEMM (src/ops/cuda/grouped_gemm_schedule.h) without a GPU: every output
// element of every expert is covered by exactly one tile, no tile reaches outside its expert's rows, the row tiles of
// one column block are adjacent (the L2 sharing the kernel relies on), and experts without rows have no tiles. And
// --grouped-gemm-kernel's routing (grouped_gemm::by_wgmma): the rule the measurement chose.
#include "ops/cuda/grouped_gemm_schedule.h"
#include "ops/cuda/grouped_gemm_wg.h"

#include <gtest/gtest.h>

#include <vector>

namespace quill::cuda::grouped_gemm {
namespace {

void check_schedule(const std::vector<int64_t>& counts, int n_blocks, int tile_rows, int tile_cols) {
  const int64_t E = static_cast<int64_t>(counts.size());
  std::vector<int> row_offset(E + 1), tile_offset(E + 1);
  const int64_t total = fill_schedule(counts.data(), E, n_blocks, tile_rows, row_offset.data(), tile_offset.data());
  int64_t P = 0, want_tiles = 0;
  for (int64_t c : counts) P += c, want_tiles += (c + tile_rows - 1) / tile_rows * n_blocks;
  ASSERT_EQ(total, want_tiles);
  ASSERT_EQ(row_offset[E], P);
  // covered[row][block]: how many tiles store that row's block of columns.
  std::vector<int> covered(static_cast<size_t>(P * n_blocks), 0);
  Tile previous{};
  for (int t = 0; t < total; ++t) {
    const Tile x = tile_at(row_offset.data(), tile_offset.data(), static_cast<int>(E), tile_rows, tile_cols, t);
    ASSERT_GE(x.e, 0);
    ASSERT_LT(x.e, E);
    ASSERT_GT(counts[x.e], 0) << "tile " << t << " of expert " << x.e << ", which has no rows";
    EXPECT_EQ(x.row0, row_offset[x.e]);
    EXPECT_EQ(x.rows, counts[x.e]);
    ASSERT_LT(x.m0, x.rows) << "tile " << t << " starts past its expert's rows";
    EXPECT_EQ(x.m0 % tile_rows, 0);
    ASSERT_EQ(x.n0 % tile_cols, 0);
    ASSERT_LT(x.n0 / tile_cols, n_blocks);
    for (int r = x.m0; r < x.rows && r < x.m0 + tile_rows; ++r) ++covered[static_cast<size_t>((x.row0 + r) * n_blocks + x.n0 / tile_cols)];
    // Within an expert the next tile is the next row tile of the same column block, or the next block's first.
    if (t > 0 && x.e == previous.e) {
      const bool next_row_tile = x.n0 == previous.n0 && x.m0 == previous.m0 + tile_rows;
      const bool next_block = x.n0 == previous.n0 + tile_cols && x.m0 == 0;
      EXPECT_TRUE(next_row_tile || next_block) << "tile " << t << " does not follow tile " << t - 1;
    }
    previous = x;
  }
  for (int64_t i = 0; i < P * n_blocks; ++i) ASSERT_EQ(covered[static_cast<size_t>(i)], 1) << "row " << i / n_blocks << ", block " << i % n_blocks;
}

TEST(GroupedGemmSchedule, EveryOutputOnceAndRowTilesAdjacent) {
  check_schedule({0, 100, 128, 1, 0, 200, 127, 129, 64, 65, 0}, 2, 128, 256);
  check_schedule({384, 384, 384}, 16, 128, 256);
  check_schedule({5}, 1, 128, 256);
  check_schedule({0, 0, 0, 7}, 3, 128, 256);   // the first experts without rows
  check_schedule({7, 0, 0, 0}, 3, 128, 256);   // the last ones
  std::vector<int64_t> seed(32, 384);
  seed[3] = 0, seed[17] = 1, seed[31] = 1000;
  check_schedule(seed, 16, 128, 256);
}

TEST(GroupedGemmSchedule, NoRowsNoTiles) {
  const std::vector<int64_t> counts = {0, 0};
  std::vector<int> row_offset(3), tile_offset(3);
  EXPECT_EQ(fill_schedule(counts.data(), 2, 4, 128, row_offset.data(), tile_offset.data()), 0);
  EXPECT_EQ(row_offset[2], 0);
}

TEST(GroupedGemmRouting, AutoTakesTheKernelForFp8AndForSmallGroupsAsMeasured) {
  using quill::GroupedGemmKernel;
  // auto: bf16 up to kAutoMeanRows rows per expert on average (a seed rank's 384: the kernel; the slice's ~1,536:
  // cuBLASLt), FP8 at any size.
  EXPECT_TRUE(by_wgmma(GroupedGemmKernel::kAuto, false, 32 * 384, 32));
  EXPECT_TRUE(by_wgmma(GroupedGemmKernel::kAuto, false, 32 * kAutoMeanRows, 32));
  EXPECT_FALSE(by_wgmma(GroupedGemmKernel::kAuto, false, 32 * kAutoMeanRows + 1, 32));
  EXPECT_FALSE(by_wgmma(GroupedGemmKernel::kAuto, false, 32 * 1536, 32));
  EXPECT_TRUE(by_wgmma(GroupedGemmKernel::kAuto, true, 32 * 1536, 32));
  // A forced choice wins either way.
  for (bool fp8 : {false, true}) {
    EXPECT_TRUE(by_wgmma(GroupedGemmKernel::kWgmma, fp8, 32 * 4096, 32));
    EXPECT_FALSE(by_wgmma(GroupedGemmKernel::kCublasLt, fp8, 32 * 16, 32));
  }
  GroupedGemmKernel k = GroupedGemmKernel::kAuto;
  EXPECT_TRUE(quill::parse_grouped_gemm_kernel("wgmma", k));
  EXPECT_EQ(k, GroupedGemmKernel::kWgmma);
  EXPECT_FALSE(quill::parse_grouped_gemm_kernel("cutlass", k));
  EXPECT_STREQ(quill::grouped_gemm_kernel_name(GroupedGemmKernel::kAuto), "auto");
}

}  // namespace
}  // namespace quill::cuda::grouped_gemm
