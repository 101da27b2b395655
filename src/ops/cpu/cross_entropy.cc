// CPU reference of the masked next-token cross-entropy fused with its gradient.
//   L = vocab_limit (the unpadded vocabulary); per row t with weight w[t] != 0:
//     lse[t]  = log sum_{v<L} exp(logits[t, v])          (max-shifted, in double)
//     loss   += w[t] * (lse[t] - logits[t, target[t]])
//     dlogits[t, v] = grad_scale * w[t] * (exp(logits[t, v] - lse[t]) - [v == target[t]])   for v < L
//   dlogits[t, v >= L] = 0, and rows with w[t] == 0 get an all-zero gradient (their target is not read,
//   so an ignore index such as -100 is fine there). Returns the unscaled loss sum, in double.
// Legend: T positions, V padded vocabulary. logits_TV, weights_T, dlogits_TV share one float dtype;
// targets_T is I32. dlogits may alias logits (each row is read fully before it is written).
#include "ops/cross_entropy.h"
#include "ops/op_table.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/dispatch.h"

namespace quill::ops {
namespace {

using ops_detail::dispatch_float;
using ops_detail::require_cpu;
using ops_detail::require_dtype;
using ops_detail::require_shape;

template <typename T>
double forward_backward_impl(const Tensor& logits_TV, const Tensor& targets_T, const Tensor& weights_T, int64_t L,
                             double grad_scale, const Tensor& dlogits_TV) {
  const int64_t n_pos = logits_TV.dim(0), V = logits_TV.dim(1);
  const T* logits = logits_TV.data_as<T>();
  const int32_t* targets = targets_T.data_as<int32_t>();
  const T* weights = weights_T.data_as<T>();
  T* dlogits = dlogits_TV.data_as<T>();
  double loss = 0;
  for (int64_t t = 0; t < n_pos; ++t) {
    const T* row = logits + t * V;
    T* grow = dlogits + t * V;
    const double w = weights[t];
    if (w == 0) {
      std::fill(grow, grow + V, T(0));
      continue;
    }
    const int64_t target = targets[t];
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t v = 0; v < L; ++v) mx = std::max(mx, static_cast<double>(row[v]));
    double sum = 0;
    for (int64_t v = 0; v < L; ++v) sum += std::exp(row[v] - mx);
    const double lse = mx + std::log(sum);
    loss += w * (lse - static_cast<double>(row[target]));
    const double g = grad_scale * w;
    for (int64_t v = 0; v < L; ++v) {
      const double p = std::exp(row[v] - lse);
      grow[v] = static_cast<T>(g * (v == target ? p - 1.0 : p));
    }
    std::fill(grow + L, grow + V, T(0));
  }
  return loss;
}

}  // namespace

double cross_entropy_forward_backward(const DeviceContext& ctx, const Tensor& logits_TV, const Tensor& targets_T,
                                      const Tensor& weights_T, int64_t vocab_limit, double grad_scale,
                                      const Tensor& dlogits_TV) {
  if (ctx.device == Device::CUDA) return cuda_op(ctx, &OpTable::cross_entropy_forward_backward, "cross_entropy_forward_backward")(ctx, logits_TV, targets_T, weights_T, vocab_limit, grad_scale, dlogits_TV);
  const char* op = "cross_entropy_forward_backward";
  QUILL_CHECK(logits_TV.defined() && logits_TV.ndim() == 2, "{}: logits must be 2-D [T, V], got {}", op,
              logits_TV.describe());
  const int64_t n_pos = logits_TV.dim(0), V = logits_TV.dim(1);
  QUILL_CHECK(vocab_limit >= 1 && vocab_limit <= V, "{}: vocab_limit {} is outside [1, {}] (the logits' columns)", op,
              vocab_limit, V);
  require_shape(op, "targets", targets_T, {n_pos});
  require_shape(op, "weights", weights_T, {n_pos});
  require_shape(op, "dlogits", dlogits_TV, {n_pos, V});
  require_dtype(op, "targets", targets_T, DType::I32);
  require_dtype(op, "weights", weights_T, logits_TV.dtype());
  require_dtype(op, "dlogits", dlogits_TV, logits_TV.dtype());
  require_cpu(op, ctx);
  // Targets are checked before anything is written, so a bad batch leaves dlogits untouched.
  double loss = 0;
  dispatch_float(op, logits_TV, [&]<typename T>() {
    const int32_t* targets = targets_T.data_as<int32_t>();
    const T* weights = weights_T.data_as<T>();
    for (int64_t t = 0; t < n_pos; ++t)
      QUILL_CHECK(weights[t] == T(0) || (targets[t] >= 0 && targets[t] < vocab_limit),
                  "{}: target {} at position {} (weight {}) is outside the vocabulary [0, {})", op, targets[t], t,
                  static_cast<double>(weights[t]), vocab_limit);
    loss = forward_backward_impl<T>(logits_TV, targets_T, weights_T, vocab_limit, grad_scale, dlogits_TV);
  });
  return loss;
}

}  // namespace quill::ops
