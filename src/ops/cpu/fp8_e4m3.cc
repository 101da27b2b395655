// E4M3 conversion and blockwise scales (ops/fp8_e4m3.h), written from the format's definition rather
// than from the hardware's bit manipulation: a magnitude is a multiple of its binade's quantum
// (2^(e-3) for a normal value of exponent e, 2^-9 below the smallest normal), so rounding is "divide by
// the quantum, round to the nearest integer with ties to even, multiply back", and the code of
// n * quantum is (e + 6) * 8 + n with e clamped at -6, which also carries a rounding up into the next
// binade (n = 16) onto the right code. tests/ops/fp8_e4m3_test.cc checks every code and the ties.
#include "ops/fp8_e4m3.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

namespace quill::fp8 {
namespace {

// Round to nearest, ties to even, whatever the floating-point environment's rounding mode.
double round_half_even(double q) {
  const double lower = std::floor(q), rest = q - lower;
  if (rest > 0.5 || (rest == 0.5 && std::fmod(lower, 2.0) != 0.0)) return lower + 1.0;
  return lower;
}

}  // namespace

uint8_t e4m3_from_double(double x) {
  if (std::isnan(x)) return kE4M3NaN;  // the hardware's canonical NaN, whatever the input's sign
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const double a = std::fabs(x);
  // Above 448 (infinities included) the saturating cast returns the largest finite value. The values in
  // (448, 464] would round to 448 by ties-to-even anyway; beyond, saturation is the rule.
  if (a > static_cast<double>(kE4M3Max)) return static_cast<uint8_t>(sign | 0x7E);
  if (a <= 0x1p-10) return sign;  // at or below half the smallest subnormal: zero (a tie rounds to 0, even)
  int e2 = 0;
  std::frexp(a, &e2);  // a = f * 2^e2 with f in [0.5, 1): its exponent is e2 - 1
  const int exponent = std::max(e2 - 1, -6);
  const double n = round_half_even(std::ldexp(a, 3 - exponent));  // exact scaling by a power of two
  return static_cast<uint8_t>(sign | ((exponent + 6) * 8 + static_cast<int>(n)));
}

uint8_t e4m3_from_float(float x) { return e4m3_from_double(static_cast<double>(x)); }

float e4m3_to_float(uint8_t code) {
  const int magnitude = code & 0x7F;
  if (magnitude == 0x7F) return std::numeric_limits<float>::quiet_NaN();
  const int e = magnitude >> 3, m = magnitude & 7;
  const float v = e == 0 ? std::ldexp(static_cast<float>(m), -9) : std::ldexp(static_cast<float>(8 + m), e - 10);
  return (code & 0x80) ? -v : v;
}

float block_scale(float amax) {
  if (!std::isfinite(amax)) return std::numeric_limits<float>::quiet_NaN();
  if (amax == 0.0f) return 1.0f;
  float s = kE4M3Max / amax;
  if (std::isinf(s)) s = std::numeric_limits<float>::max();
  // Clearing the mantissa rounds a positive normal float down to a power of two.
  return std::bit_cast<float>(std::bit_cast<uint32_t>(s) & 0xFF800000u);
}

float block_scale_inv(float scale) { return 1.0f / scale; }

}  // namespace quill::fp8
