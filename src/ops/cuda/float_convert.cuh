// Widening a bf16 or fp32 element to fp32 and narrowing back (round to nearest even), for kernels that are
// templates on their element type (the cross-entropy kernels, the FP8 quantisers).
#pragma once

#include <cuda_bf16.h>

namespace quill::cuda {

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T>
__device__ __forceinline__ T from_f32(float v);
template <>
__device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) { return __float2bfloat16(v); }

}  // namespace quill::cuda
