// Shared pieces of the bandwidth-bound bf16 kernels (rmsnorm.cu, swiglu.cu, moe_plumbing.cu).
//
// A "unit" is kW consecutive bf16 elements of one row, moved as one load or store: kW = 8 is one
// 16-byte access (the fast path, for widths that are a multiple of 8 and 16-byte aligned tensors,
// which the host checks with aligned16), kW = 1 the scalar fallback for every other shape. Kernels
// are templates on kW, so both paths run the same arithmetic. Values are widened to fp32 exactly
// (a bf16 is the top half of an fp32) and narrowed with round-to-nearest-even, as __float2bfloat16.
//
// resident_blocks sizes grid-stride kernels to one full wave: every block resident at once, so the
// work divides evenly (with more blocks than fit, the equally loaded blocks of a partial second wave
// would run while most SMs sit idle).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "ops/cuda/cuda_resources.h"

namespace quill::cuda::units {

constexpr int kVec = 8;  // bf16 elements in 16 bytes

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// kW bf16 values as they sit in memory (little-endian: element 2j in the low half of 32-bit word j).
template <int kW>
struct Bf16Unit;

template <>
struct Bf16Unit<8> {
  uint4 bits;
  __device__ __forceinline__ float operator[](int i) const {  // i a compile-time constant after unrolling
    const uint32_t w = (i >> 1) == 0 ? bits.x : (i >> 1) == 1 ? bits.y : (i >> 1) == 2 ? bits.z : bits.w;
    return __uint_as_float((i & 1) ? (w & 0xffff0000u) : (w << 16));
  }
};

template <>
struct Bf16Unit<1> {
  unsigned short bits;
  __device__ __forceinline__ float operator[](int) const { return __uint_as_float(static_cast<uint32_t>(bits) << 16); }
};

// p must be 16-byte aligned when kW == 8.
template <int kW>
__device__ __forceinline__ Bf16Unit<kW> load_unit(const __nv_bfloat16* p) {
  if constexpr (kW == 8) return {*reinterpret_cast<const uint4*>(p)};
  else return {__bfloat16_as_ushort(*p)};
}

template <int kW>
__device__ __forceinline__ Bf16Unit<kW> zero_unit() {
  if constexpr (kW == 8) return {make_uint4(0u, 0u, 0u, 0u)};
  else return {static_cast<unsigned short>(0)};
}

// 16-byte stores go through __stwb (st.global.wb.v4, the default caching): a plain uint4 assignment
// was split into four 4-byte stores by the compiler in some unrolled copies.

// Stores a unit's bits unchanged (a copy).
template <int kW>
__device__ __forceinline__ void store_unit(__nv_bfloat16* p, const Bf16Unit<kW>& u) {
  if constexpr (kW == 8) __stwb(reinterpret_cast<uint4*>(p), u.bits);
  else *p = __ushort_as_bfloat16(u.bits);
}

// Two fp32 values rounded to bf16 (nearest even), packed as they sit in memory (lo at the lower address).
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return (static_cast<uint32_t>(__bfloat16_as_ushort(h.y)) << 16) | __bfloat16_as_ushort(h.x);
}

// Rounds kW fp32 values to bf16 (nearest even) and stores them.
template <int kW>
__device__ __forceinline__ void store_unit(__nv_bfloat16* p, const float (&v)[kW]) {
  if constexpr (kW == 8) {
    __stwb(reinterpret_cast<uint4*>(p), make_uint4(pack_bf16x2(v[0], v[1]), pack_bf16x2(v[2], v[3]),
                                                   pack_bf16x2(v[4], v[5]), pack_bf16x2(v[6], v[7])));
  } else {
    *p = __float2bfloat16(v[0]);
  }
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Blocks of `threads` threads that fit on the device at once (one full wave), at most `useful` and at
// least 1.
template <typename Kernel>
unsigned resident_blocks(Kernel kernel, int threads, size_t dynamic_smem, int device, int64_t useful) {
  int sms = 0, per_sm = 0;
  QUILL_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  QUILL_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, dynamic_smem));
  const int64_t wave = static_cast<int64_t>(sms) * std::max(per_sm, 1);
  return static_cast<unsigned>(std::max<int64_t>(1, std::min(wave, useful)));
}

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace quill::cuda::units
