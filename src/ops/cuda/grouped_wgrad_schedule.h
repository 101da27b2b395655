// The tile walk and the staging layout of the experts' weight-gradient kernel (grouped_wgrad_wg.cu), as arithmetic
// that needs no GPU, so that the CPU tests check it (tests/ops/grouped_wgrad_schedule_test.cc).
//
// Tile t is expert t / (tiles_m tiles_n)'s block of kTileM gradient rows by kN columns (the kernel's kTileN); its
// product runs over the expert's rows kTileRows at a time, of one source or of two one after the other
// (stage_count stages; none for an expert without rows). CTA b walks the
// tiles b, b + grid, ... The consumers take the stages of those tiles in that order; thread 0, the producer, loads
// them in the same order, kStages ahead (its Cursor, moved by advance), so the two must name the same (tile, stage)
// at every step: the test walks both.
#pragma once

#include <cstdint>

#include "ops/cuda/attention_wg_layout.h"
#include "ops/cuda/grouped_wgrad_wg.h"

#if defined(__CUDACC__)
#define QUILL_GW_HD __host__ __device__ __forceinline__
#else
#define QUILL_GW_HD inline
#endif

namespace quill::cuda::grouped_wgrad {

// A tile and the rows its product runs over: expert e's rows of the first source (row0, rows) and, when the call
// has two (two micro-batches' rows in one GEMM: --moe-expert-wgrad-micro-batches 2), then those of the second
// (row0_b, rows_b). Each source's rows are staged kTileRows at a time, its last stage partial.
struct Tile {
  int e, m0, n0, row0, rows, row0_b, rows_b;
};

// Grid: anything with offset[e] .. offset[e + 1] as expert e's rows, two_sources and offset_b likewise for the second
// source's, and tiles_m, tiles_n as dw's rows / kTileM and columns / kN (the kernel's parameter block; a host struct
// in the tests).
template <int kN = static_cast<int>(kTileN), class Grid>
QUILL_GW_HD Tile tile_at(const Grid& g, int t) {
  const int per_expert = g.tiles_m * g.tiles_n;
  Tile x;
  x.e = t / per_expert;
  const int r = t % per_expert;
  x.m0 = (r / g.tiles_n) * static_cast<int>(kTileM);
  x.n0 = (r % g.tiles_n) * kN;
  x.row0 = g.offset[x.e];
  x.rows = g.offset[x.e + 1] - x.row0;
  x.row0_b = g.two_sources ? g.offset_b[x.e] : 0;
  x.rows_b = g.two_sources ? g.offset_b[x.e + 1] - x.row0_b : 0;
  return x;
}

QUILL_GW_HD int stage_count(int rows) {
  return (rows + static_cast<int>(kTileRows) - 1) / static_cast<int>(kTileRows);
}

// A tile's stages: the first source's, then the second's.
QUILL_GW_HD int stage_count(const Tile& x) { return stage_count(x.rows) + stage_count(x.rows_b); }

// What stage kt of tile x reads: the source (0 or 1), its first row there, and how many of its kTileRows rows are
// the expert's (the rest, up to kTileRows, belong to the next expert or lie past the tensor: zeroed before use).
struct StageRows {
  int source, row, valid;
};
QUILL_GW_HD StageRows stage_rows(const Tile& x, int kt) {
  const int first = stage_count(x.rows), rows = static_cast<int>(kTileRows);
  if (kt < first) return {0, x.row0 + kt * rows, x.rows - kt * rows < rows ? x.rows - kt * rows : rows};
  const int kb = kt - first;
  return {1, x.row0_b + kb * rows, x.rows_b - kb * rows < rows ? x.rows_b - kb * rows : rows};
}

// The producer's position: this CTA's tile t and its stage kt; t >= total when every load is issued.
struct Cursor {
  int t, kt;
};

// Moves c to this CTA's next stage (grid: the CTAs' count, the walk's stride); tiles of experts without rows have
// none. A cursor starts at {blockIdx, -1}: the first advance finds the CTA's first stage.
template <int kN = static_cast<int>(kTileN), class Grid>
QUILL_GW_HD void advance(const Grid& g, int total, int grid, Cursor& c) {
  ++c.kt;
  while (c.t < total && c.kt >= stage_count(tile_at<kN>(g, c.t))) {
    c.t += grid;
    c.kt = 0;
  }
}

// The staging tile: the tile's fp32 gradient as kN / 32 boxes of 128 rows x 32 columns (128 bytes), each swizzled
// as TMA's SWIZZLE_128B lays it out, box b holding columns 32 b .. 32 b + 31 (what the TMA loads and stores).
constexpr int kStagingBoxBytes = static_cast<int>(kTileM) * attn_wg::kRowBytes;  // 16 KiB
QUILL_GW_HD constexpr int staging_boxes(int kN) { return kN / 32; }

// The staging byte of accumulator pair (4 j + 2 sel, +1) of thread (warpgroup w, warp, lane 4 g + cq): wgmma's
// m64nNk16 accumulator layout puts it at the tile's row 64 w + 16 warp + g + 8 sel, columns 8 j + 2 cq and + 1
// (the second float 4 bytes on).
QUILL_GW_HD uint32_t staging_byte(int w, int warp, int g, int cq, int j, int sel) {
  const uint32_t r = 64 * w + 16 * warp + g + 8 * sel;
  const uint32_t byte = ((8 * j + 2 * cq) % 32) * 4;
  return (j / 4) * kStagingBoxBytes + attn_wg::swizzle128(r, byte);
}

}  // namespace quill::cuda::grouped_wgrad
