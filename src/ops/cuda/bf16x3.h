// An fp32 value as the exact sum of three bf16 values, for fp32 GEMMs run as bf16 tensor-core products
// (the router's gate: src/ops/cuda/router_gate.cu). Host and device code, so the CPU tests check the split the
// kernels use.
//
// Math: hi = rn(v), mid = rn(v - hi), lo = rn(v - hi - mid) with rn the round to nearest even bf16. Each
// subtraction is exact in fp32 (the difference of v and a nearby rounding of it), v - hi has at most 16
// significant bits and v - hi - mid at most 8, which bf16 holds: so hi + mid + lo == v exactly for every
// finite v whose parts stay normal (|v| above ~2^-110; smaller parts lose bits to fp32's subnormals, a
// relative error far below fp32's rounding of the GEMM's sums). A non-finite v is hi = v, mid = lo = 0.
// A product of two bf16 values is exact in fp32, so sum_k x_k w_k over split operands is the sum of
// exact products: what an fp32 GEMM computes, rounded in another order.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define QUILL_B3_HD __host__ __device__
#else
#define QUILL_B3_HD
#endif

namespace quill::bf16x3 {

QUILL_B3_HD inline uint32_t bits_of(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  return b;
}
QUILL_B3_HD inline float float_of(uint32_t b) {
  float v;
  std::memcpy(&v, &b, 4);
  return v;
}

// v rounded to the nearest bf16 (ties to even), as an fp32 value with its low 16 bits zero. Finite v only.
QUILL_B3_HD inline float round_to_bf16(float v) {
  const uint32_t b = bits_of(v);
  return float_of((b + 0x7fffu + ((b >> 16) & 1u)) & 0xffff0000u);
}

// The bf16 bits of a value round_to_bf16 returned (exact: its low half is zero).
QUILL_B3_HD inline uint16_t bf16_bits(float rounded) { return static_cast<uint16_t>(bits_of(rounded) >> 16); }

struct Parts {
  float hi, mid, lo;
};

QUILL_B3_HD inline Parts split(float v) {
  if ((bits_of(v) & 0x7f800000u) == 0x7f800000u) return {v, 0.f, 0.f};  // inf or NaN: kept whole
  const float hi = round_to_bf16(v);
  const float r = v - hi;
  const float mid = round_to_bf16(r);
  return {hi, mid, round_to_bf16(r - mid)};
}

// Part p (0 hi, 1 mid, 2 lo) of v, as bf16 bits.
QUILL_B3_HD inline uint16_t part_bits(float v, int p) {
  const Parts s = split(v);
  return bf16_bits(p == 0 ? s.hi : p == 1 ? s.mid : s.lo);
}

}  // namespace quill::bf16x3
