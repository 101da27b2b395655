// Random numbers that are the same on every backend and every layout.
//
// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11) is counter
// based: the value at (key, counter) does not depend on what was drawn before, so a tensor
// initialised on the CPU, on a GPU, or split over ranks gets the same numbers. SplitMix64
// (Steele et al., 2014) is the documented sequential 64-bit generator used for data shuffling.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define QUILL_HD __host__ __device__
#else
#define QUILL_HD
#endif

namespace quill {

struct Philox4x32 {
  uint32_t v[4];
};

// One Philox4x32-10 block: 4 uint32 outputs for (key, counter).
QUILL_HD inline Philox4x32 philox4x32_10(uint64_t key, uint64_t counter_lo, uint64_t counter_hi = 0) {
  uint32_t c0 = static_cast<uint32_t>(counter_lo), c1 = static_cast<uint32_t>(counter_lo >> 32);
  uint32_t c2 = static_cast<uint32_t>(counter_hi), c3 = static_cast<uint32_t>(counter_hi >> 32);
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  const uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u, W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = static_cast<uint64_t>(M0) * c0;
    uint64_t p1 = static_cast<uint64_t>(M1) * c2;
    uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0; c1 = n1; c2 = n2; c3 = n3;
    k0 += W0; k1 += W1;
  }
  return Philox4x32{{c0, c1, c2, c3}};
}

// Uniform in (0, 1], from 32 random bits (never 0, so log() is safe).
QUILL_HD inline float uniform_from_bits(uint32_t bits) {
  return (static_cast<float>(bits >> 8) + 1.0f) * (1.0f / 16777216.0f);
}

// Box-Muller's radius and angle of Philox block `pair` of the stream `key`: the normals 2*pair
// (radius * cos(angle)) and 2*pair + 1 (radius * sin(angle)).
struct PolarPair {
  float radius, angle;
};
QUILL_HD inline PolarPair polar_pair_at(uint64_t key, uint64_t pair) {
  Philox4x32 r = philox4x32_10(key, pair);
  float u1 = uniform_from_bits(r.v[0]);
  float u2 = uniform_from_bits(r.v[1]);
  return PolarPair{sqrtf(-2.0f * logf(u1)), 6.283185307179586f * u2};
}

// Standard normal number `index` of the stream `key` (Box-Muller on one Philox block).
QUILL_HD inline float normal_at(uint64_t key, uint64_t index) {
  const PolarPair p = polar_pair_at(key, index / 2);
  return (index % 2 == 0) ? p.radius * cosf(p.angle) : p.radius * sinf(p.angle);
}

// normal_at(key, 2*pair) and normal_at(key, 2*pair + 1), the same bits, for the cost of one Philox
// block and one logarithm (a random initialisation of a seed rank's 8e9 weights spent 50 s in them).
QUILL_HD inline void normal_pair_at(uint64_t key, uint64_t pair, float& even, float& odd) {
  const PolarPair p = polar_pair_at(key, pair);
  even = p.radius * cosf(p.angle);
  odd = p.radius * sinf(p.angle);
}

// Uniform in [0, 1) number `index` of the stream `key`.
QUILL_HD inline float uniform_at(uint64_t key, uint64_t index) {
  Philox4x32 r = philox4x32_10(key, index);
  return static_cast<float>(r.v[0] >> 8) * (1.0f / 16777216.0f);
}

// SplitMix64: state += 0x9E3779B97F4A7C15; z = state; z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9;
// z = (z ^ (z >> 27)) * 0x94D049BB133111EB; return z ^ (z >> 31).
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform integer in [0, bound) by Lemire's multiply-shift with rejection (unbiased).
  uint64_t below(uint64_t bound);
  uint64_t state() const { return state_; }
  void set_state(uint64_t s) { state_ = s; }

 private:
  uint64_t state_;
};

// Stream key for a named use (a parameter's name, "data", ...) under a run seed: FNV-1a of the
// name mixed with the seed, so streams are independent and stable across code changes.
uint64_t stream_key(uint64_t seed, const char* name);

}  // namespace quill
