// CPU reference of the vocab-parallel cross-entropy (ops/cross_entropy.h). With every shard's
// statistics merged in shard order:
//   M[t] = max_r max_r[t];  S[t] = sum_r sum_r[t] * exp(max_r[t] - M[t]);  lse[t] = M[t] + log S[t]
//   loss += w[t] * (lse[t] - sum_r target_r[t])     (one shard holds the target, the others add 0)
//   dlogits[t, c] = grad_scale * w[t] * (exp(logits[t, c] - lse[t]) - [vocab_begin + c == target])
// for this shard's columns below vocab_limit, 0 beyond it and on unweighted rows. In double.
#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/cross_entropy.h"
#include "ops/dispatch.h"
#include "ops/op_table.h"

namespace quill::ops {
namespace {

using ops_detail::dispatch_float;
using ops_detail::require_cpu;
using ops_detail::require_dtype;
using ops_detail::require_shape;

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

struct ShardColumns {
  int64_t T, V, valid;  // rows, this shard's columns, those below vocab_limit
};

ShardColumns check_shard(const char* op, const Tensor& logits_TV, const Tensor& targets_T, const Tensor& weights_T,
                         int64_t vocab_begin, int64_t vocab_limit) {
  QUILL_CHECK(logits_TV.defined() && logits_TV.ndim() == 2, "{}: logits must be 2-D [T, V], got {}", op,
              logits_TV.describe());
  const int64_t T = logits_TV.dim(0), V = logits_TV.dim(1);
  QUILL_CHECK(vocab_begin >= 0 && vocab_limit >= 1, "{}: vocab_begin {} / vocab_limit {} out of range", op,
              vocab_begin, vocab_limit);
  require_shape(op, "targets", targets_T, {T});
  require_shape(op, "weights", weights_T, {T});
  require_dtype(op, "targets", targets_T, DType::I32);
  require_dtype(op, "weights", weights_T, logits_TV.dtype());
  return {T, V, std::clamp<int64_t>(vocab_limit - vocab_begin, 0, V)};
}

template <typename S>
void stats_impl(const Tensor& logits_TV, const Tensor& targets_T, const Tensor& weights_T, int64_t vocab_begin,
                const ShardColumns& g, const Tensor& stats_T3) {
  dispatch_float("cross_entropy_shard_stats", logits_TV, [&]<typename T>() {
    const T* logits = logits_TV.data_as<T>();
    const T* weights = weights_T.data_as<T>();
    const int32_t* targets = targets_T.data_as<int32_t>();
    S* out = stats_T3.data_as<S>();
    for (int64_t t = 0; t < g.T; ++t) {
      const T* row = logits + t * g.V;
      double mx = kNegInf, sum = 0, target = 0;
      for (int64_t c = 0; c < g.valid; ++c) mx = std::max(mx, static_cast<double>(row[c]));
      if (g.valid > 0)
        for (int64_t c = 0; c < g.valid; ++c) sum += std::exp(row[c] - mx);
      const int64_t local = static_cast<int64_t>(targets[t]) - vocab_begin;
      if (weights[t] != T(0) && local >= 0 && local < g.valid) target = row[local];
      out[t * 3 + 0] = static_cast<S>(mx);
      out[t * 3 + 1] = static_cast<S>(sum);
      out[t * 3 + 2] = static_cast<S>(target);
    }
  });
}

template <typename S>
double backward_impl(const Tensor& logits_TV, const Tensor& targets_T, const Tensor& weights_T, int64_t vocab_begin,
                     const ShardColumns& g, const Tensor& all_stats, double grad_scale, const Tensor& dlogits_TV) {
  const int64_t R = all_stats.dim(0);
  const S* stats = all_stats.data_as<S>();
  double loss = 0;
  dispatch_float("cross_entropy_shard_backward", logits_TV, [&]<typename T>() {
    const T* logits = logits_TV.data_as<T>();
    const T* weights = weights_T.data_as<T>();
    const int32_t* targets = targets_T.data_as<int32_t>();
    T* dlogits = dlogits_TV.data_as<T>();
    for (int64_t t = 0; t < g.T; ++t) {
      T* grow = dlogits + t * g.V;
      const double w = weights[t];
      if (w == 0) {
        std::fill(grow, grow + g.V, T(0));
        continue;
      }
      double mx = kNegInf, target = 0;
      for (int64_t r = 0; r < R; ++r) mx = std::max(mx, static_cast<double>(stats[(r * g.T + t) * 3]));
      double sum = 0;
      for (int64_t r = 0; r < R; ++r) {
        const S* s = stats + (r * g.T + t) * 3;
        if (static_cast<double>(s[0]) != kNegInf) sum += static_cast<double>(s[1]) * std::exp(s[0] - mx);
        target += static_cast<double>(s[2]);
      }
      const double lse = mx + std::log(sum);
      loss += w * (lse - target);
      const T* row = logits + t * g.V;
      const int64_t local = static_cast<int64_t>(targets[t]) - vocab_begin;
      const double scale = grad_scale * w;
      for (int64_t c = 0; c < g.valid; ++c) {
        const double p = std::exp(row[c] - lse);
        grow[c] = static_cast<T>(scale * (c == local ? p - 1.0 : p));
      }
      std::fill(grow + g.valid, grow + g.V, T(0));
    }
  });
  return loss;
}

}  // namespace

void cross_entropy_shard_stats(const DeviceContext& ctx, const Tensor& logits_TV, const Tensor& targets_T,
                               const Tensor& weights_T, int64_t vocab_begin, int64_t vocab_limit,
                               const Tensor& stats_T3) {
  if (ctx.device == Device::CUDA)
    return cuda_op(ctx, &OpTable::cross_entropy_shard_stats, "cross_entropy_shard_stats")(
        ctx, logits_TV, targets_T, weights_T, vocab_begin, vocab_limit, stats_T3);
  const char* op = "cross_entropy_shard_stats";
  require_cpu(op, ctx);
  const ShardColumns g = check_shard(op, logits_TV, targets_T, weights_T, vocab_begin, vocab_limit);
  require_shape(op, "stats", stats_T3, {g.T, 3});
  dispatch_float(op, weights_T, [&]<typename T>() {
    const int32_t* targets = targets_T.data_as<int32_t>();
    const T* weights = weights_T.data_as<T>();
    for (int64_t t = 0; t < g.T; ++t)
      QUILL_CHECK(weights[t] == T(0) || (targets[t] >= 0 && targets[t] < vocab_limit),
                  "{}: target {} at position {} (weight {}) is outside the vocabulary [0, {})", op, targets[t], t,
                  static_cast<double>(weights[t]), vocab_limit);
  });
  if (stats_T3.dtype() == DType::F64) stats_impl<double>(logits_TV, targets_T, weights_T, vocab_begin, g, stats_T3);
  else if (stats_T3.dtype() == DType::F32) stats_impl<float>(logits_TV, targets_T, weights_T, vocab_begin, g, stats_T3);
  else QUILL_FAIL("{}: stats has dtype {}, expected F32 or F64", op, dtype_name(stats_T3.dtype()));
}

double cross_entropy_shard_backward(const DeviceContext& ctx, const Tensor& logits_TV, const Tensor& targets_T,
                                    const Tensor& weights_T, int64_t vocab_begin, int64_t vocab_limit,
                                    const Tensor& all_stats_RT3, double grad_scale, const Tensor& dlogits_TV) {
  if (ctx.device == Device::CUDA)
    return cuda_op(ctx, &OpTable::cross_entropy_shard_backward, "cross_entropy_shard_backward")(
        ctx, logits_TV, targets_T, weights_T, vocab_begin, vocab_limit, all_stats_RT3, grad_scale, dlogits_TV);
  const char* op = "cross_entropy_shard_backward";
  require_cpu(op, ctx);
  const ShardColumns g = check_shard(op, logits_TV, targets_T, weights_T, vocab_begin, vocab_limit);
  QUILL_CHECK(all_stats_RT3.defined() && all_stats_RT3.ndim() == 3 && all_stats_RT3.dim(1) == g.T &&
                  all_stats_RT3.dim(2) == 3,
              "{}: all_stats must be [R, {}, 3], got {}", op, g.T, all_stats_RT3.describe());
  require_shape(op, "dlogits", dlogits_TV, {g.T, g.V});
  require_dtype(op, "dlogits", dlogits_TV, logits_TV.dtype());
  if (all_stats_RT3.dtype() == DType::F64)
    return backward_impl<double>(logits_TV, targets_T, weights_T, vocab_begin, g, all_stats_RT3, grad_scale,
                                 dlogits_TV);
  QUILL_CHECK(all_stats_RT3.dtype() == DType::F32, "{}: all_stats has dtype {}, expected F32 or F64", op,
              dtype_name(all_stats_RT3.dtype()));
  return backward_impl<float>(logits_TV, targets_T, weights_T, vocab_begin, g, all_stats_RT3, grad_scale, dlogits_TV);
}

}  // namespace quill::ops
