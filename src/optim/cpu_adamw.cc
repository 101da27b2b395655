// Compiled with -O3 -fno-math-errno -ffp-contract=off (src/CMakeLists.txt): vectorised loops whose
// every operation rounds as the reference's does.
#include "optim/cpu_adamw.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "base/error.h"
#include "tensor/dtype.h"

namespace quill {

namespace {

// One contiguous block of fp32 state; the loop body is the reference's, term for term.
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

void widen(const uint16_t* __restrict in, float* __restrict out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(in[i]);
}
void narrow(const float* __restrict in, uint16_t* __restrict out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = f32_to_bf16(in[i]);
}

// A block whose moments may be bf16 (uint16_t bits): tiles of them are widened into fp32 scratch,
// updated by the fp32 loop above (the same operations: the update reads the fp32 moment it just
// computed) and rounded back, three loops the compiler vectorises (one mixed loop it does not).
template <typename M, typename S>
void update_block(const ops::AdamWStep& s, float decay, float step_size, float bc2_sqrt, float* w, const float* g, M* m,
                  S* v, uint16_t* out, int64_t n) {
  constexpr int64_t kTile = 2048;
  alignas(64) float mt[kTile], vt[kTile];
  for (int64_t at = 0; at < n; at += kTile) {
    const int64_t len = std::min(kTile, n - at);
    float* mf;
    float* vf;
    if constexpr (std::is_same_v<M, float>) mf = m + at;
    else widen(m + at, mf = mt, len);
    if constexpr (std::is_same_v<S, float>) vf = v + at;
    else widen(v + at, vf = vt, len);
    update_block(s, decay, step_size, bc2_sqrt, w + at, g + at, mf, vf, out ? out + at : nullptr, len);
    if constexpr (!std::is_same_v<M, float>) narrow(mt, m + at, len);
    if constexpr (!std::is_same_v<S, float>) narrow(vt, v + at, len);
  }
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
