// TMA tensor maps of the Hopper kernels that read and write whole rows (grouped_wgrad_wg.cu). bf16_matrix_map: a
// row-major bf16 matrix [rows, cols] as boxes of 64 rows x 64 columns (128 bytes), 128-byte swizzle, zero fill out
// of bounds, addressed as a 3-D map (cols, rows, 1) so that the kernels' tma_load_3d serves it.
// Defined with the attention's maps (attention_wg_tma.cu: the one place cuTensorMapEncodeTiled is called).
#pragma once

#include <cuda.h>

#include <cstdint>

namespace quill::cuda::attn_wg {

CUtensorMap bf16_matrix_map(const char* what, const void* base, int64_t rows, int64_t cols);
// A row-major byte matrix [rows, cols] (FP8 codes) as boxes of 64 rows x 128 columns (128 bytes), the same swizzle
// and addressing (cols a multiple of 16).
CUtensorMap u8_matrix_map(const char* what, const void* base, int64_t rows, int64_t cols);
// An fp32 [E, M, N] tensor (E row-major matrices) as boxes of 128 rows x 32 columns (128 bytes) of one matrix,
// 128-byte swizzle: the weight gradient's tiles, loaded and stored in bulk (grouped_wgrad_wg.cu).
CUtensorMap f32_blocks_map(const char* what, const void* base, int64_t E, int64_t M, int64_t N);

}  // namespace quill::cuda::attn_wg
