// TMA tensor maps of the Hopper attention forward. cuTensorMapEncodeTiled is a driver API entry
// point; it is fetched through the runtime (cudaGetDriverEntryPointByVersion), so quill links no
// libcuda of its own (the runtime loads the driver it already uses).
// Parameters (CUDA driver API, cuTensorMapEncodeTiled): dimension 0 is the contiguous one; strides
// are in bytes for dimensions 1.. and must be multiples of 16; box sizes in elements, <= 256, and
// with 128-byte swizzle the box's inner extent must be <= 128 bytes.
#include <fmt/format.h>

#include "ops/cuda/attention_wg_internal.h"
#include "ops/cuda/tma_matrix_map.h"

namespace quill::cuda::attn_wg {
namespace {

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

EncodeTiled encoder() {
  static const EncodeTiled fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult status{};
    QUILL_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &status));
    QUILL_CHECK(status == cudaDriverEntryPointSuccess && f != nullptr,
                "attention_forward_wgmma: the CUDA driver has no cuTensorMapEncodeTiled (status {}); TMA needs a "
                "driver for CUDA 12.0 or newer",
                static_cast<int>(status));
    return reinterpret_cast<EncodeTiled>(f);
  }();
  return fn;
}

template <int N>
CUtensorMap encode(const char* what, CUtensorMapDataType dtype, const void* base, const cuuint64_t (&dims)[N],
                   const cuuint64_t (&strides)[N - 1], const cuuint32_t (&box)[N]) {
  QUILL_CHECK(reinterpret_cast<uintptr_t>(base) % 16 == 0,
              "attention_forward_wgmma: {} starts at {}, not 16-byte aligned (TMA needs it)", what, base);
  cuuint32_t element_strides[N];
  for (int i = 0; i < N; ++i) element_strides[i] = 1;
  CUtensorMap map{};
  const CUresult rc = encoder()(&map, dtype, N, const_cast<void*>(base), dims, strides, box, element_strides,
                                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (rc != CUDA_SUCCESS) {
    std::string d, s, b;
    for (int i = 0; i < N; ++i) d += fmt::format("{}{}", i ? ", " : "", static_cast<unsigned long long>(dims[i]));
    for (int i = 0; i + 1 < N; ++i) s += fmt::format("{}{}", i ? ", " : "", static_cast<unsigned long long>(strides[i]));
    for (int i = 0; i < N; ++i) b += fmt::format("{}{}", i ? ", " : "", box[i]);
    QUILL_CHECK(false, "attention_forward_wgmma: cuTensorMapEncodeTiled failed for {} (CUresult {}): dims [{}], "
                "strides [{}] bytes, box [{}]",
                what, static_cast<int>(rc), d, s, b);
  }
  return map;
}

}  // namespace

CUtensorMap rows_map(const char* what, const void* base, int64_t T, int64_t X) {
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(kD), static_cast<cuuint64_t>(X), static_cast<cuuint64_t>(T)};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(kD * 2), static_cast<cuuint64_t>(X * kD * 2)};
  const cuuint32_t box[3] = {static_cast<cuuint32_t>(kHalfCols), 1, static_cast<cuuint32_t>(kWgRows)};
  return encode<3>(what, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, base, dims, strides, box);
}

CUtensorMap band_map(const void* band, int64_t T, int64_t H, int64_t E) {
  const int64_t I = band_rows(E), A = band_blocks(T);
  const cuuint64_t dims[4] = {32, static_cast<cuuint64_t>(I), static_cast<cuuint64_t>(A), static_cast<cuuint64_t>(H)};
  const cuuint64_t strides[3] = {32 * 4, static_cast<cuuint64_t>(I * 32 * 4), static_cast<cuuint64_t>(A * I * 32 * 4)};
  const cuuint32_t box[4] = {static_cast<cuuint32_t>(kBiasCols), static_cast<cuuint32_t>(kWgRows), 1, 1};
  return encode<4>("the bias band", CU_TENSOR_MAP_DATA_TYPE_FLOAT32, band, dims, strides, box);
}

CUtensorMap bf16_matrix_map(const char* what, const void* base, int64_t rows, int64_t cols) {
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows), 1};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(cols * 2), static_cast<cuuint64_t>(rows * cols * 2)};
  const cuuint32_t box[3] = {static_cast<cuuint32_t>(kHalfCols), static_cast<cuuint32_t>(kWgRows), 1};
  return encode<3>(what, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, base, dims, strides, box);
}

CUtensorMap u8_matrix_map(const char* what, const void* base, int64_t rows, int64_t cols) {
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows), 1};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows * cols)};
  const cuuint32_t box[3] = {static_cast<cuuint32_t>(kRowBytes), static_cast<cuuint32_t>(kWgRows), 1};
  return encode<3>(what, CU_TENSOR_MAP_DATA_TYPE_UINT8, base, dims, strides, box);
}

CUtensorMap f32_blocks_map(const char* what, const void* base, int64_t E, int64_t M, int64_t N) {
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(N), static_cast<cuuint64_t>(M), static_cast<cuuint64_t>(E)};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(N * 4), static_cast<cuuint64_t>(M * N * 4)};
  const cuuint32_t box[3] = {static_cast<cuuint32_t>(kBiasCols), 128, 1};
  return encode<3>(what, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, base, dims, strides, box);
}

}  // namespace quill::cuda::attn_wg
