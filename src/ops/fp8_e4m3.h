// The scalar numerics of FP8 E4M3 and of its blockwise scales, on the host: the CPU backend's FP8
// emulation and the tests of the CUDA kernels both read these (docs/fp8.md).
//
// E4M3 (OCP 8-bit floating point specification, "E4M3"; NVIDIA's __nv_fp8_e4m3): 1 sign bit, 4 exponent
// bits (bias 7), 3 mantissa bits; no infinities; the codes 0x7F and 0xFF are NaN; the largest finite value
// is 0x7E = 1.75 * 2^8 = 448; the smallest normal 2^-6; subnormals are multiples of 2^-9.
//
// Conversion from fp32 is what the GPU's saturating cvt does (PTX cvt.rn.satfinite.e4m3x2.f32, behind
// __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3)): round to nearest, ties to even; every finite or
// infinite value of magnitude above 448 becomes +-448 (saturation, never NaN); any NaN becomes 0x7F;
// magnitudes at or below 2^-10 (half the smallest subnormal) become a zero of the input's sign.
#pragma once

#include <cstdint>

namespace quill::fp8 {

inline constexpr float kE4M3Max = 448.0f;
inline constexpr uint8_t kE4M3NaN = 0x7F;
// The blocks' edge: 1x128 tiles for activations and gradients, 128x128 blocks for weights
// (DeepSeek-V3 technical report, arXiv:2412.19437, section 3.3.2).
inline constexpr int64_t kBlock = 128;

uint8_t e4m3_from_float(float x);
uint8_t e4m3_from_double(double x);  // the same rounding from a double (float inputs convert exactly)
float e4m3_to_float(uint8_t code);   // exact; NaN for 0x7F and 0xFF

// The quantisation multiplier of a block whose largest magnitude is `amax` (docs/decisions/fp8-blockwise.md):
// 448 / amax divided in fp32 (IEEE round to nearest), an infinite quotient (amax below 448 / FLT_MAX)
// clamped to FLT_MAX, then rounded down to a power of two by clearing its mantissa bits, so that
// amax * scale <= 448 (up to the division's rounding, which the saturating cast absorbs). amax 0 (an
// all-zero block): 1. A non-finite amax (the block holds an inf or a NaN): NaN, so that every element of
// the block quantises to NaN and the non-finite value reaches the loss instead of being saturated away.
float block_scale(float amax);
// The dequantisation factor stored beside the codes: 1 / scale, exact (a power of two; NaN stays NaN).
float block_scale_inv(float scale);

}  // namespace quill::fp8
