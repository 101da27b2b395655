// The tile schedule of the grouped wgmma GEMM (grouped_gemm_wg.cu), as arithmetic that needs no GPU, so that the
// CPU tests check it (tests/ops/grouped_gemm_schedule_test.cc): which expert, rows and columns tile t covers.
//
// Expert e's rows [row_offset[e], row_offset[e + 1]) are cut into row tiles of `tile_rows` from its first row (the
// last one partial), its output columns into blocks of `tile_cols`. Its tiles are numbered from tile_offset[e],
// column block by column block with the row tiles of one block adjacent, so that the CTAs that start together
// share that block of the expert's weights in the L2. An expert without rows has no tiles.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define QUILL_GG_HD __host__ __device__
#else
#define QUILL_GG_HD
#endif

namespace quill::cuda::grouped_gemm {

struct Tile {
  int e;     // the expert
  int row0;  // its first row in the grouped tensor
  int rows;  // its row count
  int m0;    // the tile's first row, counted from row0 (rows m0 .. min(m0 + tile_rows, rows) - 1 are stored)
  int n0;    // the tile's first output column
};

QUILL_GG_HD inline int row_tiles(int rows, int tile_rows) { return (rows + tile_rows - 1) / tile_rows; }

// The tables of E experts from their row counts: row_offset and tile_offset, E + 1 entries each. Returns the
// number of tiles.
inline int64_t fill_schedule(const int64_t* counts, int64_t E, int n_blocks, int tile_rows, int* row_offset,
                             int* tile_offset) {
  int64_t row = 0, tiles = 0;
  for (int64_t e = 0; e < E; ++e) {
    row_offset[e] = static_cast<int>(row);
    tile_offset[e] = static_cast<int>(tiles);
    row += counts[e];
    tiles += static_cast<int64_t>(row_tiles(static_cast<int>(counts[e]), tile_rows)) * n_blocks;
  }
  row_offset[E] = static_cast<int>(row);
  tile_offset[E] = static_cast<int>(tiles);
  return tiles;
}

// Tile t (0 <= t < tile_offset[E]): the expert whose tiles hold it (the last e with tile_offset[e] <= t, which
// skips the experts without tiles), then its row tile and column block.
QUILL_GG_HD inline Tile tile_at(const int* row_offset, const int* tile_offset, int E, int tile_rows, int tile_cols,
                                int t) {
  int lo = 0, hi = E - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (tile_offset[mid] <= t) lo = mid;
    else hi = mid - 1;
  }
  Tile x;
  x.e = lo;
  x.row0 = row_offset[lo];
  x.rows = row_offset[lo + 1] - x.row0;
  const int tiles_per_block = row_tiles(x.rows, tile_rows);
  const int local = t - tile_offset[lo];
  x.m0 = (local % tiles_per_block) * tile_rows;
  x.n0 = (local / tiles_per_block) * tile_cols;
  return x;
}

}  // namespace quill::cuda::grouped_gemm
