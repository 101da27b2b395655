// E4M3 conversion and block scales (ops/fp8_e4m3.h): every code round-trips, known values from the
// format's definition, ties to even between every pair of neighbouring codes, saturation, subnormals,
// NaN; and, where the CUDA toolkit's headers are installed, equality with NVIDIA's own host
// implementation of __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3) over every exponent, 2^11
// leading mantissa patterns and the trailing patterns that decide a rounding (exact, tie, either side).
#include "ops/fp8_e4m3.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>

#ifdef QUILL_HAVE_CUDA_FP8_H
#include <cuda_fp8.h>
#endif

namespace quill {
namespace {

using fp8::block_scale;
using fp8::e4m3_from_float;
using fp8::e4m3_to_float;

TEST(Fp8E4M3, EveryCodeRoundTripsAndNaNCodesReadAsNaN) {
  int finite = 0;
  for (int c = 0; c < 256; ++c) {
    const uint8_t code = static_cast<uint8_t>(c);
    const float v = e4m3_to_float(code);
    if ((c & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(v)) << c;
      continue;
    }
    ++finite;
    EXPECT_EQ(e4m3_from_float(v), code) << "code " << c << " value " << v;
    EXPECT_EQ(std::signbit(v), c >= 0x80) << c;
  }
  EXPECT_EQ(finite, 254);
}

TEST(Fp8E4M3, KnownValues) {
  EXPECT_EQ(e4m3_to_float(0x7E), 448.0f);         // 1.75 * 2^8, the largest
  EXPECT_EQ(e4m3_to_float(0x38), 1.0f);           // exponent field 7 = bias
  EXPECT_EQ(e4m3_to_float(0x08), 0x1p-6f);        // smallest normal
  EXPECT_EQ(e4m3_to_float(0x07), 7 * 0x1p-9f);    // largest subnormal
  EXPECT_EQ(e4m3_to_float(0x01), 0x1p-9f);        // smallest subnormal
  EXPECT_EQ(e4m3_to_float(0xC0), -2.0f);
  EXPECT_EQ(e4m3_to_float(0x77), 240.0f);         // 1.875 * 2^7
  EXPECT_EQ(e4m3_from_float(1.0f), 0x38);
  EXPECT_EQ(e4m3_from_float(-0.0f), 0x80);
  EXPECT_EQ(e4m3_from_float(0.0f), 0x00);
  EXPECT_EQ(e4m3_from_float(1.0625f), 0x38);      // a tie between 1 and 1.125: to 1 (even mantissa)
  EXPECT_EQ(e4m3_from_float(1.1875f), 0x3A);      // a tie between 1.125 and 1.25: to 1.25 (even)
  EXPECT_EQ(e4m3_from_float(0.3f), 0x2A);         // 0.3 = 1.2 * 2^-2 -> 1.25 * 2^-2: field 5, mantissa 2
}

TEST(Fp8E4M3, SaturatesInsteadOfOverflowingAndKeepsNaN) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (float v : {448.0f, 449.0f, 463.9f, 464.0f, 465.0f, 480.0f, 1e9f, 3.4e38f, inf}) {
    EXPECT_EQ(e4m3_from_float(v), 0x7E) << v;
    EXPECT_EQ(e4m3_from_float(-v), 0xFE) << v;
  }
  EXPECT_EQ(e4m3_from_float(nan), 0x7F);
  EXPECT_EQ(e4m3_from_float(-nan), 0x7F);  // the canonical NaN, sign dropped, as the hardware does
}

TEST(Fp8E4M3, SubnormalsAndUnderflow) {
  EXPECT_EQ(e4m3_from_float(0x1p-10f), 0x00);            // half the smallest subnormal: a tie to 0 (even)
  EXPECT_EQ(e4m3_from_float(-0x1p-10f), 0x80);
  EXPECT_EQ(e4m3_from_float(std::nextafter(0x1p-10f, 1.0f)), 0x01);
  EXPECT_EQ(e4m3_from_float(3 * 0x1p-10f), 0x02);        // 1.5 quanta: tie between 1 and 2 -> 2
  EXPECT_EQ(e4m3_from_float(5 * 0x1p-10f), 0x02);        // 2.5 quanta: tie between 2 and 3 -> 2
  EXPECT_EQ(e4m3_from_float(15 * 0x1p-10f), 0x08);       // 7.5 quanta: to 8 = the smallest normal
  EXPECT_EQ(e4m3_from_float(1e-30f), 0x00);
  EXPECT_EQ(e4m3_from_float(std::numeric_limits<float>::denorm_min()), 0x00);
}

// Between every two neighbouring finite codes: the midpoint goes to the even code, a float either side
// of it to the nearer one.
TEST(Fp8E4M3, TiesToEvenBetweenEveryPairOfNeighbours) {
  for (int c = 0; c < 0x7E; ++c) {
    const float lo = e4m3_to_float(static_cast<uint8_t>(c)), hi = e4m3_to_float(static_cast<uint8_t>(c + 1));
    const float mid = (lo + hi) / 2;  // exact: both have few significant bits
    const int even = c % 2 == 0 ? c : c + 1;
    for (int s : {0, 0x80}) {
      const float sign = s ? -1.0f : 1.0f;
      EXPECT_EQ(e4m3_from_float(sign * mid), even | s) << "between codes " << c << " and " << c + 1;
      EXPECT_EQ(e4m3_from_float(sign * std::nextafter(mid, 0.0f)), c | s) << c;
      EXPECT_EQ(e4m3_from_float(sign * std::nextafter(mid, 1e9f)), (c + 1) | s) << c;
    }
  }
}

TEST(Fp8BlockScale, PowerOfTwoWithAmaxTimesScaleAtMost448) {
  EXPECT_EQ(block_scale(448.0f), 1.0f);
  EXPECT_EQ(block_scale(1.0f), 256.0f);       // 448 rounded down to a power of two
  EXPECT_EQ(block_scale(448.0f / 1024), 1024.0f);
  EXPECT_EQ(block_scale(449.0f), 0.5f);
  EXPECT_EQ(block_scale(0.0f), 1.0f);          // an all-zero block
  EXPECT_EQ(block_scale(1e-45f), 0x1p127f);    // 448 / amax overflows: FLT_MAX, rounded down
  EXPECT_TRUE(std::isnan(block_scale(std::numeric_limits<float>::infinity())));
  EXPECT_TRUE(std::isnan(block_scale(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(fp8::block_scale_inv(256.0f), 1.0f / 256);
  for (float amax = 1e-30f; amax < 1e30f; amax *= 1.37f) {
    const float s = block_scale(amax);
    EXPECT_EQ(std::bit_cast<uint32_t>(s) & 0x007FFFFFu, 0u) << amax;  // a power of two
    EXPECT_LE(amax * s, 448.0f * (1 + 1e-7f)) << amax;
    EXPECT_GT(amax * s, 224.0f * (1 - 1e-7f)) << amax;                 // at most one binade wasted
  }
}

#ifdef QUILL_HAVE_CUDA_FP8_H
TEST(Fp8E4M3, EqualsNvidiaHostConversionOverEveryExponent) {
  const uint32_t tails[] = {0x000, 0x001, 0x7FF, 0x800, 0x801, 0xFFF, 0x3A5};
  int64_t checked = 0;
  for (uint32_t sign = 0; sign < 2; ++sign)
    for (uint32_t exponent = 0; exponent < 256; ++exponent)
      for (uint32_t lead = 0; lead < (1u << 11); ++lead)
        for (uint32_t tail : tails) {
          const uint32_t bits = (sign << 31) | (exponent << 23) | (lead << 12) | tail;
          const float x = std::bit_cast<float>(bits);
          const auto want = static_cast<uint8_t>(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3));
          ASSERT_EQ(e4m3_from_float(x), want) << "bits 0x" << std::hex << bits << " value " << x;
          ++checked;
        }
  EXPECT_EQ(checked, int64_t{2} * 256 * 2048 * 7);
}
#endif

}  // namespace
}  // namespace quill
