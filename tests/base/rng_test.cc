// base/rng.h: the pair form of the normal draws gives normal_at's bits.
#include "base/rng.h"

#include <gtest/gtest.h>

#include <cstring>

namespace quill {
namespace {

uint32_t bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof(b));
  return b;
}

TEST(Rng, NormalPairMatchesNormalAtBitForBit) {
  for (uint64_t key : {uint64_t{0}, uint64_t{42}, uint64_t{0x9E3779B97F4A7C15ull}})
    for (uint64_t pair = 0; pair < 20000; ++pair) {
      float even = 0, odd = 0;
      normal_pair_at(key, pair, even, odd);
      ASSERT_EQ(bits(even), bits(normal_at(key, 2 * pair))) << "key " << key << " pair " << pair;
      ASSERT_EQ(bits(odd), bits(normal_at(key, 2 * pair + 1))) << "key " << key << " pair " << pair;
    }
}

}  // namespace
}  // namespace quill
