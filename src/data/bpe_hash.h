// The hashing and word loads shared by the BPE tables (bpe.cc) and the merges (bpe_merge.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace quill::bpe_detail {

inline uint64_t load_le(const uint8_t* p, size_t n) {  // n <= 8
  // The n bytes zero-extended, read with at most two overlapping fixed-size loads (v5: a memcpy
  // of variable length is a call; this ran for every piece in hashing and the cache keys). Where
  // the loads overlap they hold the same bytes, so the OR is exact.
  if (n >= 4) {
    if (n == 8) {
      uint64_t w;
      std::memcpy(&w, p, 8);
      return w;
    }
    uint32_t lo, hi;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + n - 4, 4);
    return lo | (static_cast<uint64_t>(hi) << (8 * (n - 4)));
  }
  if (n >= 2) {
    uint16_t lo, hi;
    std::memcpy(&lo, p, 2);
    std::memcpy(&hi, p + n - 2, 2);
    return lo | (static_cast<uint64_t>(hi) << (8 * (n - 2)));
  }
  return n == 1 ? p[0] : 0;
}

inline uint64_t mix(uint64_t h) {
  h ^= h >> 32;
  h *= 0xD6E8FEB86659FD93ull;
  h ^= h >> 32;
  return h;
}

}  // namespace quill::bpe_detail
