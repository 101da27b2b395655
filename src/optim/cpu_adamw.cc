// Compiled with -O3 -fno-math-errno -ffp-contract=off (src/CMakeLists.txt): vectorised loops whose
// every operation rounds as the reference's does.
#include "optim/cpu_adamw.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "tensor/dtype.h"

namespace quill {

namespace {

inline float load(float x) { return x; }
inline float load(uint16_t x) { return bf16_to_f32(x); }
inline void store(float& d, float x) { d = x; }
inline void store(uint16_t& d, float x) { d = f32_to_bf16(x); }

// One contiguous block; the loop body is the reference's, term for term. M and S: the moments'
// element types (float, or uint16_t bf16 bits).
template <typename M, typename S>
void update_block(const ops::AdamWStep& s, float decay, float step_size, float bc2_sqrt, float* __restrict w,
                  const float* __restrict g, M* __restrict m, S* __restrict v, uint16_t* __restrict out, int64_t n) {
  const float clip = s.clip, beta1 = s.beta1, beta2 = s.beta2, eps = s.eps;
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] * clip;
    const float mi = beta1 * load(m[i]) + (1.0f - beta1) * gi;
    const float vi = beta2 * load(v[i]) + (1.0f - beta2) * gi * gi;
    store(m[i], mi);
    store(v[i], vi);
    w[i] *= decay;
    w[i] -= step_size * mi / (std::sqrt(vi) / bc2_sqrt + eps);
  }
  if (out)
    for (int64_t i = 0; i < n; ++i) out[i] = f32_to_bf16(w[i]);
}

template <typename M, typename S>
void update_all(const ops::AdamWStep& s, float* w, const float* g, M* m, S* v, uint16_t* bf16_out, int64_t n,
                ThreadPool& pool) {
  // The scalar factors exactly as the reference forms them.
  const float decay = 1.0f - s.lr * s.weight_decay;
  const float step_size = static_cast<float>(s.lr / s.bias_correction1);
  const float bc2_sqrt = static_cast<float>(std::sqrt(s.bias_correction2));
  // Blocks of at least 64 Ki elements (1.25 MiB of state), a few per thread.
  constexpr int64_t kMinBlock = int64_t{1} << 16;
  const int64_t blocks = std::clamp<int64_t>(n / kMinBlock, 1, 4 * pool.threads());
  const int64_t per = (n + blocks - 1) / blocks;
  auto block = [&](size_t b) {
    const int64_t begin = static_cast<int64_t>(b) * per, len = std::min(n, begin + per) - begin;
    if (len <= 0) return;
    update_block(s, decay, step_size, bc2_sqrt, w + begin, g + begin, m + begin, v + begin,
                 bf16_out ? bf16_out + begin : nullptr, len);
  };
  if (blocks == 1) block(0);  // small ranges (most parameters of a small model) skip the pool
  else pool.parallel_for(static_cast<size_t>(blocks), block);
}

}  // namespace

void adamw_update_host(const ops::AdamWStep& s, float* w, const float* g, float* m, float* v, uint16_t* bf16_out,
                       int64_t n, ThreadPool& pool) {
  update_all(s, w, g, m, v, bf16_out, n, pool);
}

void adamw_update_host(const ops::AdamWStep& s, float* w, const float* g, void* m, DType m_dtype, void* v,
                       DType v_dtype, uint16_t* bf16_out, int64_t n, ThreadPool& pool) {
  for (DType d : {m_dtype, v_dtype})
    QUILL_CHECK(d == DType::F32 || d == DType::BF16, "host AdamW: a moment has dtype {}, expected F32 or BF16",
                dtype_name(d));
  const bool m16 = m_dtype == DType::BF16, v16 = v_dtype == DType::BF16;
  auto* mf = static_cast<float*>(m);
  auto* mh = static_cast<uint16_t*>(m);
  auto* vf = static_cast<float*>(v);
  auto* vh = static_cast<uint16_t*>(v);
  if (!m16 && !v16) update_all(s, w, g, mf, vf, bf16_out, n, pool);
  else if (m16 && !v16) update_all(s, w, g, mh, vf, bf16_out, n, pool);
  else if (!m16 && v16) update_all(s, w, g, mf, vh, bf16_out, n, pool);
  else update_all(s, w, g, mh, vh, bf16_out, n, pool);
}

}  // namespace quill
