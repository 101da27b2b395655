// Blockwise FP8 quantisation on the GPU, into the layouts cuBLASLt's block-scaled FP8 GEMMs read
// (fp8_gemm.cu; the numerics are ops/fp8.h's and docs/decisions/fp8-blockwise.md's: a tile's amax that
// does not skip NaN, scale = 448 / amax in fp32 with its mantissa cleared, the saturating E4M3 cast).
//
// Hopper's FP8 tensor cores read both operands K-major (Transformer Engine: "Hopper only supports TN
// GEMMs for FP8"), and cuBLASLt's FP8 GEMMs want every leading dimension a multiple of 16 bytes and the
// non-contracted dimension of a 1x128-scaled operand a multiple of 8. The row counts of quill's GEMMs
// (a micro-batch's tokens, an expert's rows) are anything, so the activation and gradient operands are
// quantised into a padded row space: group g's rows (all rows for a dense GEMM, expert g's for a
// grouped one) start at padded row dst[g], a multiple of kRowAlign, and the rows up to dst[g + 1] are
// zeros (codes 0, which add nothing to any sum, and factor 1: an all-zero tile's). Tiles never cross
// a group: the 128-row tiles of the weight gradient start at each group's first row, as on the CPU.
//
// Layouts (row-major; every factor a power of two, stored as scale_inv = 1 / scale):
//   rows128     codes [Np, C] (row d is padded row d); factors per group g, at g's base Cb * dst[g]:
//               [Cb, rows_g] (element [j][r]: tile j of the group's row r), rows_g = dst[g+1] - dst[g],
//               Cb = ceil(C / 128). This is cuBLASLt's VEC128_32F layout of the group's operand.
//   columns128  the transpose: codes_t [C, Np] (column c of padded row d at c * Np + d); factors per group
//               at g's base tile[g] * roundup(C, 4): [tiles_g, roundup(C, 4)] (element [t][c]: tile t of
//               column c), tiles_g = ceil(rows_g / 128).
//   blocks128   weights [E, M, K]: codes, codes_t [E, K, M], scale_inv [E, ceil(M/128), roundup(ceil(K/128), 4)]
//               and scale_inv_t [E, ceil(K/128), roundup(ceil(M/128), 4)] (ops/fp8.h).
#pragma once

#include <cstdint>

#include "ops/device_context.h"

namespace quill::cuda::fp8q {

inline constexpr int64_t kRowAlign = 16;
inline constexpr int kMaxGroups = 256;  // a rank's experts (Inkling has 256 in all)

// Where each group's rows lie, in the source and in the padded row space; passed to the kernels by value.
struct RowGroups {
  int count = 0;
  int32_t src[kMaxGroups + 1] = {};   // first source row of each group; src[count] = the source rows
  int32_t dst[kMaxGroups + 1] = {};   // first padded row (a multiple of kRowAlign); dst[count] = Np
  int32_t tile[kMaxGroups + 1] = {};  // first 128-row tile; tile[count] = all tiles
  int64_t rows(int g) const { return src[g + 1] - src[g]; }
  int64_t padded_rows(int g) const { return dst[g + 1] - dst[g]; }
  int64_t padded_total() const { return dst[count]; }
  bool padded() const { return dst[count] != src[count]; }
};

// One group of `rows` rows (a dense GEMM), or one per count (counts on the host). Throws naming `op`
// beyond kMaxGroups groups or 2^31 rows.
RowGroups single_group(const char* op, int64_t rows);
RowGroups groups_of(const char* op, const int64_t* counts, int64_t E);

// x [rows, C] (BF16 or F32, any alignment) -> codes [Np, C] and the rows128 factors (C % 4 == 0).
void quantize_rows(const DeviceContext& ctx, const void* x, DType x_dtype, int64_t C, const RowGroups& g,
                   uint8_t* codes, float* scale_inv);
// x [rows, C] -> codes_t [C, Np] and the columns128 factors (C % 4 == 0).
void quantize_columns_transposed(const DeviceContext& ctx, const void* x, DType x_dtype, int64_t C,
                                 const RowGroups& g, uint8_t* codes_t, float* scale_inv);
// w [E, M, K] -> the blocks128 codes, codes_t and both factor arrays.
void quantize_blocks(const DeviceContext& ctx, const void* w, DType w_dtype, int64_t E, int64_t M, int64_t K,
                     uint8_t* codes, uint8_t* codes_t, float* scale_inv, float* scale_inv_t);
// out [E, R, C] (F32 or BF16) = codes [E, R, C] times the factor of its 128x128 block, whose array has
// rows of `scale_ld` floats ([E, ceil(R/128), scale_ld]).
void dequantize_blocks(const DeviceContext& ctx, const uint8_t* codes, const float* scale_inv, int64_t scale_ld,
                       int64_t E, int64_t R, int64_t C, void* out, DType out_dtype);
// out [rows, C] (BF16 or F32) = pad [Np, C] (F32 or out's dtype) at each source row's padded row, plus
// out where `accumulate`, rounded once to out's dtype.
void unpad_rows(const DeviceContext& ctx, const void* pad, DType pad_dtype, int64_t C, const RowGroups& g, void* out,
                DType out_dtype, bool accumulate);

}  // namespace quill::cuda::fp8q
