#include "base/rng.h"

namespace quill {

uint64_t SplitMix64::below(uint64_t bound) {
  // Lemire, "Fast random integer generation in an interval" (2019).
  unsigned __int128 m = static_cast<unsigned __int128>(next()) * bound;
  uint64_t low = static_cast<uint64_t>(m);
  if (low < bound) {
    uint64_t threshold = (0 - bound) % bound;
    while (low < threshold) {
      m = static_cast<unsigned __int128>(next()) * bound;
      low = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

uint64_t stream_key(uint64_t seed, const char* name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const char* p = name; *p; ++p) {
    h ^= static_cast<unsigned char>(*p);
    h *= 0x100000001b3ull;
  }
  SplitMix64 mix(h ^ (seed * 0x9E3779B97F4A7C15ull));
  return mix.next();
}

}  // namespace quill
