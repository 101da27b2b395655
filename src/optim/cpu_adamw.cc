// Compiled with -O3 -fno-math-errno -ffp-contract=off (src/CMakeLists.txt): vectorised loops whose
// every operation rounds as the reference's does.
#include "optim/cpu_adamw.h"

#include <algorithm>
#include <cmath>

#include "tensor/dtype.h"

namespace quill {

namespace {

// One contiguous block; the loop body is the reference's, term for term.
void update_block(const ops::AdamWStep& s, float decay, float step_size, float bc2_sqrt, float* __restrict w,
                  const float* __restrict g, float* __restrict m, float* __restrict v, uint16_t* __restrict out,
                  int64_t n) {
  const float clip = s.clip, beta1 = s.beta1, beta2 = s.beta2, eps = s.eps;
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] * clip;
    m[i] = beta1 * m[i] + (1.0f - beta1) * gi;
    v[i] = beta2 * v[i] + (1.0f - beta2) * gi * gi;
    w[i] *= decay;
    w[i] -= step_size * m[i] / (std::sqrt(v[i]) / bc2_sqrt + eps);
  }
  if (out)
    for (int64_t i = 0; i < n; ++i) out[i] = f32_to_bf16(w[i]);
}

}  // namespace

void adamw_update_host(const ops::AdamWStep& s, float* w, const float* g, float* m, float* v, uint16_t* bf16_out,
                       int64_t n, ThreadPool& pool) {
  // The scalar factors exactly as the reference forms them.
  const float decay = 1.0f - s.lr * s.weight_decay;
  const float step_size = static_cast<float>(s.lr / s.bias_correction1);
  const float bc2_sqrt = static_cast<float>(std::sqrt(s.bias_correction2));
  // Blocks of at least 64 Ki elements (1.25 MiB of state), a few per thread.
  constexpr int64_t kMinBlock = int64_t{1} << 16;
  const int64_t blocks = std::clamp<int64_t>(n / kMinBlock, 1, 4 * pool.threads());
  const int64_t per = (n + blocks - 1) / blocks;
  pool.parallel_for(static_cast<size_t>(blocks), [&](size_t b) {
    const int64_t begin = static_cast<int64_t>(b) * per, len = std::min(n, begin + per) - begin;
    if (len <= 0) return;
    update_block(s, decay, step_size, bc2_sqrt, w + begin, g + begin, m + begin, v + begin,
                 bf16_out ? bf16_out + begin : nullptr, len);
  });
}

}  // namespace quill
