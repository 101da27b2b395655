// Device helpers of the cross-entropy kernels (cross_entropy.cu, cross_entropy_shard.cu): vector packs and
// the running (max, sum of exp(x - max)) of a stream of logits.
#pragma once

#include <cuda_bf16.h>

#include <cmath>

#include "ops/cuda/float_convert.cuh"

namespace quill::cuda {

template <typename T, int VEC>
struct alignas(sizeof(T) * VEC) Pack {
  T v[VEC];
};

// Running (max, sum of exp(x - max)) of a stream of values.
__device__ __forceinline__ void online_add(float& m, float& s, float x) {
  if (x == -INFINITY) return;  // contributes nothing (and -inf - -inf would be NaN)
  if (x > m) {
    s = s * expf(m - x) + 1.0f;
    m = x;
  } else {
    s += expf(x - m);  // NaN propagates through here
  }
}

__device__ __forceinline__ void online_merge(float& m, float& s, float m2, float s2) {
  const float mx = fmaxf(m, m2);
  if (mx == -INFINITY) return;  // both empty
  s = (m == -INFINITY ? 0.f : s * expf(m - mx)) + (m2 == -INFINITY ? 0.f : s2 * expf(m2 - mx));
  m = (m != m || m2 != m2) ? NAN : mx;  // fmaxf drops a NaN; keep it
}

// The block's (max, sum) of every thread's (m, s), returned to every thread. blockDim.x a multiple of
// 32, at most 1024; s_m and s_s are 32-entry shared arrays. Merges in a fixed order (deterministic).
__device__ __forceinline__ void block_online_reduce(float& m, float& s, float* s_m, float* s_s) {
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
    online_merge(m, s, m2, s2);
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  if (lane == 0) {
    s_m[warp] = m;
    s_s[warp] = s;
  }
  __syncthreads();
  if (warp == 0) {
    m = lane < n_warps ? s_m[lane] : -INFINITY;
    s = lane < n_warps ? s_s[lane] : 0.f;
    for (int o = 16; o > 0; o >>= 1) {
      const float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
      online_merge(m, s, m2, s2);
    }
    if (lane == 0) {
      s_m[0] = m;
      s_s[0] = s;
    }
  }
  __syncthreads();
  m = s_m[0];
  s = s_s[0];
}

}  // namespace quill::cuda
