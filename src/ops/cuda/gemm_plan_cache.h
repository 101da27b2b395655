// cuBLASLt algorithms chosen once per problem shape and reused (gemm.cu). Why: asking cuBLASLt's
// heuristic for every call cost the host 3 to 143 ms per grouped expert op (32 calls) on the GPU
// machine (bench/results/2026-11-30-callE/grouped_bench.txt) while the GPU needed 1.2 to 3.3 ms, so
// after the route plan's synchronising count copy the GPU waited for the host. The routed experts'
// row counts change every step, so the one dimension that follows a row count is bucketed (rounded
// up to a multiple of kBucket); the heuristic is asked once per bucket, on the bucket's shape, and its
// algorithm runs every problem of the bucket (cuBLASLt kernels take any size up to the tile grid; a
// call the algorithm refuses falls back to an exact query, gemm.cu). Deterministic: an entry depends
// only on its key, never on which call came first. (The switch that turned it off, an environment variable,
// is gone: the cache won its measurement.)
#pragma once

#include <cublasLt.h>

#include <cstdint>
#include <functional>
#include <unordered_map>

namespace quill::cuda {

struct GemmPlanKey {
  int32_t ta, tb, a_type, b_type, d_type;
  uint64_t m, n, k;  // n and k bucketed when they follow a row count
  int64_t lda, ldb;
  uint32_t al_a, al_b, al_d;
  bool accumulate;
  int32_t a_scale_mode, b_scale_mode;  // -1: an operand without block scales
  bool operator==(const GemmPlanKey& o) const {
    return ta == o.ta && tb == o.tb && a_type == o.a_type && b_type == o.b_type && d_type == o.d_type && m == o.m &&
           n == o.n && k == o.k && lda == o.lda && ldb == o.ldb && al_a == o.al_a && al_b == o.al_b &&
           al_d == o.al_d && accumulate == o.accumulate &&
           a_scale_mode == o.a_scale_mode && b_scale_mode == o.b_scale_mode;
  }
};

struct GemmPlanKeyHash {
  size_t operator()(const GemmPlanKey& key) const {
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the fields
    auto mix = [&](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
    mix(static_cast<uint64_t>(key.ta)); mix(static_cast<uint64_t>(key.tb)); mix(static_cast<uint64_t>(key.a_type));
    mix(static_cast<uint64_t>(key.b_type)); mix(static_cast<uint64_t>(key.d_type)); mix(key.m); mix(key.n);
    mix(key.k); mix(static_cast<uint64_t>(key.lda)); mix(static_cast<uint64_t>(key.ldb)); mix(key.al_a);
    mix(key.al_b); mix(key.al_d); mix(key.accumulate ? 1 : 0);
    mix(static_cast<uint64_t>(key.a_scale_mode)); mix(static_cast<uint64_t>(key.b_scale_mode));
    return static_cast<size_t>(h);
  }
};

struct GemmPlanCache {
  static constexpr uint64_t kBucket = 256;
  static uint64_t bucket(uint64_t x) { return x <= kBucket ? x : (x + kBucket - 1) / kBucket * kBucket; }
  std::unordered_map<GemmPlanKey, cublasLtMatmulAlgo_t, GemmPlanKeyHash> algos;
  int64_t hits = 0, misses = 0, fallbacks = 0;
};

}  // namespace quill::cuda
