// A TMA tensor map of a row-major bf16 matrix [rows, cols] as boxes of 64 rows x 64 columns (128 bytes),
// 128-byte swizzle, zero fill out of bounds: the operand tiles of the Hopper kernels that read whole rows
// (grouped_wgrad_wg.cu). Addressed as a 3-D map (cols, rows, 1) so that the kernels' tma_load_3d serves it.
// Defined with the attention's maps (attention_wg_tma.cu: the one place cuTensorMapEncodeTiled is called).
#pragma once

#include <cuda.h>

#include <cstdint>

namespace quill::cuda::attn_wg {

CUtensorMap bf16_matrix_map(const char* what, const void* base, int64_t rows, int64_t cols);

}  // namespace quill::cuda::attn_wg
