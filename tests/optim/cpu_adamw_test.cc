// The host AdamW of CPU offload against the CPU reference (ops::adamw_update), bit for bit, over
// several steps with clipping, weight decay and bias corrections, at 1, 2 and 7 threads, on an odd
// length; its bf16 copy equals rounding the reference's weights.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "ops/adamw.h"
#include "optim/cpu_adamw.h"
#include "tensor/dtype.h"

namespace quill {
namespace {

std::vector<float> randoms(int64_t n, uint64_t seed, float lo, float hi) {
  std::vector<float> out(static_cast<size_t>(n));
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 7;
  for (float& x : out) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    x = lo + (hi - lo) * static_cast<float>(s % 1000003) / 1000003.0f;
  }
  return out;
}

TEST(CpuAdamW, BitForBitTheReferenceAtEveryThreadCount) {
  constexpr int64_t n = 300007;
  for (int threads : {1, 2, 7}) {
    ThreadPool pool(threads);
    std::vector<float> w = randoms(n, 1, -1, 1), m(n, 0.0f), v(n, 0.0f);
    Tensor rw = Tensor::empty({n}, DType::F32), rg = Tensor::empty({n}, DType::F32), rm = Tensor::zeros({n}, DType::F32),
           rv = Tensor::zeros({n}, DType::F32);
    std::memcpy(rw.data(), w.data(), n * sizeof(float));
    std::vector<uint16_t> bf16(static_cast<size_t>(n));
    for (int t = 1; t <= 4; ++t) {
      const std::vector<float> g = randoms(n, 10 + t, -3, 3);
      std::memcpy(rg.data(), g.data(), n * sizeof(float));
      ops::AdamWStep s;
      s.lr = 1e-3f * static_cast<float>(t);
      s.beta1 = 0.9f, s.beta2 = 0.95f, s.eps = 1e-8f, s.weight_decay = 0.1f;
      s.clip = t % 2 ? 0.37f : 1.0f;
      s.bias_correction1 = 1 - std::pow(0.9, t);
      s.bias_correction2 = 1 - std::pow(0.95, t);
      ops::adamw_update(DeviceContext::cpu(), rw, rg, rm, rv, Tensor(), s);
      adamw_update_host(s, w.data(), g.data(), m.data(), v.data(), bf16.data(), n, pool);
      ASSERT_EQ(std::memcmp(w.data(), rw.data(), n * sizeof(float)), 0) << threads << " threads, step " << t;
      ASSERT_EQ(std::memcmp(m.data(), rm.data(), n * sizeof(float)), 0) << threads << " threads, step " << t;
      ASSERT_EQ(std::memcmp(v.data(), rv.data(), n * sizeof(float)), 0) << threads << " threads, step " << t;
      for (int64_t i = 0; i < n; i += 997) ASSERT_EQ(bf16[i], f32_to_bf16(rw.data_as<float>()[i])) << i;
    }
  }
}

}  // namespace
}  // namespace quill
