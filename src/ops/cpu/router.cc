// CPU reference of the Inkling top-k router (transformers' InklingTopkRouter), after the gate linear.
//
// Legend: N tokens, E routed experts, S shared experts, X = E + S logits per token, k = top_k,
// W = k + S weights per token.
//   choice_e = sigmoid(logit_e) + bias_e for e < E, in T (fp32, or double on the F64 path);
//   topk     = the k largest choices, ties to the lower expert index, listed by descending choice;
//   u        = logsigmoid(logits[topk] ++ logits[E:E+S]);  p = softmax(u);  w = p * route_scale * gs.
// Backward, with C = route_scale * gs and dp = dw * C:
//   du_i = p_i (dp_i - sum_j p_j dp_j);  dlogit_i = du_i * sigmoid(-logit_i) (d logsigmoid / dx);
//   unchosen routed logits get 0;  dgs += sum_i dw_i * route_scale * p_i.
// Dtypes: logits, bias, global_scale, weights and their gradients share one float dtype (F32/F64);
// topk_idx is I32. The softmax sums accumulate in double.
#include "ops/router.h"
#include "ops/op_table.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "ops/dispatch.h"

namespace quill::ops {
namespace {

using namespace quill::ops_detail;

// As torch computes it; exp overflowing to inf still gives the right limit 0.
template <typename T>
T sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

// log(sigmoid(x)) without overflow or cancellation for large |x|.
template <typename T>
T log_sigmoid(T x) {
  return std::min(x, T(0)) - std::log1p(std::exp(-std::fabs(x)));
}

void check_params(const char* op, const RouterParams& params) {
  QUILL_CHECK(params.n_routed > 0, "{}: n_routed is {}, expected > 0", op, params.n_routed);
  QUILL_CHECK(params.n_shared >= 0, "{}: n_shared is {}, expected >= 0", op, params.n_shared);
  QUILL_CHECK(params.top_k > 0 && params.top_k <= params.n_routed, "{}: top_k is {}, expected 1..{} (n_routed)", op,
              params.top_k, params.n_routed);
}

// Shapes and dtypes common to forward and backward; returns N.
int64_t check_router_tensors(const char* op, const Tensor& logits_NX, const Tensor& topk_idx_Nk,
                             const Tensor& weights_NW, const Tensor& global_scale, const RouterParams& params) {
  check_params(op, params);
  const int64_t E = params.n_routed, S = params.n_shared, k = params.top_k;
  QUILL_CHECK(logits_NX.defined() && logits_NX.ndim() == 2, "{}: logits_NX must be 2-D [N, {}], got {}", op, E + S,
              logits_NX.defined() ? shape_str(logits_NX.shape()) : std::string("(undefined)"));
  const int64_t N = logits_NX.dim(0);
  require_shape(op, "logits_NX", logits_NX, {N, E + S});
  require_shape(op, "topk_idx_Nk", topk_idx_Nk, {N, k});
  require_dtype(op, "topk_idx_Nk", topk_idx_Nk, DType::I32);
  require_shape(op, "weights_NW", weights_NW, {N, k + S});
  require_dtype(op, "weights_NW", weights_NW, logits_NX.dtype());
  require_shape(op, "global_scale", global_scale, {1});
  require_dtype(op, "global_scale", global_scale, logits_NX.dtype());
  return N;
}

// p = softmax(logsigmoid(l)) over the chosen routed logits then the shared ones; `l` holds them.
template <typename T>
void router_probs(const std::vector<T>& l, std::vector<T>& p) {
  p.resize(l.size());
  T u_max = -std::numeric_limits<T>::infinity();
  for (size_t i = 0; i < l.size(); ++i) {
    p[i] = log_sigmoid(l[i]);
    u_max = std::max(u_max, p[i]);
  }
  double sum = 0;
  for (size_t i = 0; i < l.size(); ++i) {
    p[i] = std::exp(p[i] - u_max);
    sum += p[i];
  }
  for (T& v : p) v = static_cast<T>(v / sum);
}

// The W logits the weights come from: the chosen routed ones (in topk order) then the shared ones.
template <typename T>
void gather_weight_logits(const T* logits, const int32_t* topk, int64_t E, int64_t S, int64_t k, std::vector<T>& l) {
  l.resize(static_cast<size_t>(k + S));
  for (int64_t j = 0; j < k; ++j) l[j] = logits[topk[j]];
  for (int64_t s = 0; s < S; ++s) l[k + s] = logits[E + s];
}

template <typename T>
void forward_impl(const Tensor& logits_NX, const Tensor& bias_E, const Tensor& global_scale,
                  const RouterParams& params, const Tensor& topk_idx_Nk, const Tensor& weights_NW, bool replay) {
  const int64_t N = logits_NX.dim(0), E = params.n_routed, S = params.n_shared, k = params.top_k;
  const int64_t X = E + S, W = k + S;
  const T* logits = logits_NX.data_as<T>();
  const T* bias = replay ? nullptr : bias_E.data_as<T>();
  const T scale = static_cast<T>(params.route_scale) * global_scale.data_as<T>()[0];
  int32_t* topk = topk_idx_Nk.data_as<int32_t>();
  T* weights = weights_NW.data_as<T>();

  std::vector<T> choice(static_cast<size_t>(E));
  std::vector<int32_t> order(static_cast<size_t>(E));
  std::vector<T> l, p;
  for (int64_t n = 0; n < N; ++n) {
    const T* row = logits + n * X;
    int32_t* tk = topk + n * k;
    if (replay) {  // the choice is given: only the weights are computed
      gather_weight_logits(row, tk, E, S, k, l);
      router_probs(l, p);
      for (int64_t i = 0; i < W; ++i) weights[n * W + i] = p[i] * scale;
      continue;
    }
    for (int64_t e = 0; e < E; ++e) {
      choice[e] = sigmoid(row[e]) + bias[e];
      // A NaN ranks last, so the comparison below stays a strict weak order.
      if (std::isnan(choice[e])) choice[e] = -std::numeric_limits<T>::infinity();
    }
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
      return choice[a] > choice[b] || (choice[a] == choice[b] && a < b);
    });
    std::copy(order.begin(), order.begin() + k, tk);

    gather_weight_logits(row, tk, E, S, k, l);
    router_probs(l, p);
    for (int64_t i = 0; i < W; ++i) weights[n * W + i] = p[i] * scale;
  }
}

template <typename T>
void backward_impl(const Tensor& logits_NX, const Tensor& topk_idx_Nk, const Tensor& global_scale,
                   const RouterParams& params, const Tensor& dweights_NW, const Tensor& dlogits_NX,
                   const Tensor& dglobal_scale) {
  const int64_t N = logits_NX.dim(0), E = params.n_routed, S = params.n_shared, k = params.top_k;
  const int64_t X = E + S, W = k + S;
  const T* logits = logits_NX.data_as<T>();
  const int32_t* topk = topk_idx_Nk.data_as<int32_t>();
  const T* dweights = dweights_NW.data_as<T>();
  T* dlogits = dlogits_NX.data_as<T>();
  const double route_scale = params.route_scale;
  const double C = route_scale * static_cast<double>(global_scale.data_as<T>()[0]);

  std::vector<T> l, p;
  std::vector<double> dp(static_cast<size_t>(W));
  double dgs = 0;
  std::fill(dlogits, dlogits + N * X, T(0));
  for (int64_t n = 0; n < N; ++n) {
    const T* row = logits + n * X;
    const int32_t* tk = topk + n * k;
    // p is recomputed from the logits rather than divided out of the weights: gs may be zero.
    gather_weight_logits(row, tk, E, S, k, l);
    router_probs(l, p);
    const T* dw = dweights + n * W;
    double p_dot_dp = 0;
    for (int64_t i = 0; i < W; ++i) {
      dp[i] = static_cast<double>(dw[i]) * C;
      p_dot_dp += p[i] * dp[i];
      dgs += static_cast<double>(dw[i]) * route_scale * p[i];
    }
    T* drow = dlogits + n * X;
    for (int64_t i = 0; i < W; ++i) {
      const double du = p[i] * (dp[i] - p_dot_dp);
      const int64_t col = i < k ? tk[i] : E + (i - k);
      drow[col] += static_cast<T>(du * sigmoid(-l[i]));
    }
  }
  dglobal_scale.data_as<T>()[0] += static_cast<T>(dgs);
}

void check_topk_range(const char* op, const Tensor& topk_idx_Nk, int64_t n_routed) {
  const int32_t* topk = topk_idx_Nk.data_as<int32_t>();
  for (int64_t i = 0; i < topk_idx_Nk.numel(); ++i)
    QUILL_CHECK(topk[i] >= 0 && topk[i] < n_routed, "{}: topk_idx_Nk element {} is expert {}, outside [0, {})", op, i,
                topk[i], n_routed);
}

}  // namespace

void router_forward(const DeviceContext& ctx, const Tensor& logits_NX, const Tensor& bias_E, const Tensor& global_scale,
                    const RouterParams& params, const Tensor& topk_idx_Nk, const Tensor& weights_NW) {
  if (ctx.device == Device::CUDA) return cuda_op(ctx, &OpTable::router_forward, "router_forward")(ctx, logits_NX, bias_E, global_scale, params, topk_idx_Nk, weights_NW);
  const char* op = "router_forward";
  require_cpu(op, ctx);
  check_router_tensors(op, logits_NX, topk_idx_Nk, weights_NW, global_scale, params);
  require_shape(op, "bias_E", bias_E, {params.n_routed});
  require_dtype(op, "bias_E", bias_E, logits_NX.dtype());
  dispatch_float(op, logits_NX, [&]<typename T>() {
    forward_impl<T>(logits_NX, bias_E, global_scale, params, topk_idx_Nk, weights_NW, false);
  });
}

void router_forward_replay(const DeviceContext& ctx, const Tensor& logits_NX, const Tensor& global_scale,
                           const RouterParams& params, const Tensor& topk_idx_Nk, const Tensor& weights_NW) {
  if (ctx.device == Device::CUDA) return cuda_op(ctx, &OpTable::router_forward_replay, "router_forward_replay")(ctx, logits_NX, global_scale, params, topk_idx_Nk, weights_NW);
  const char* op = "router_forward_replay";
  require_cpu(op, ctx);
  check_router_tensors(op, logits_NX, topk_idx_Nk, weights_NW, global_scale, params);
  check_topk_range(op, topk_idx_Nk, params.n_routed);
  dispatch_float(op, logits_NX, [&]<typename T>() {
    forward_impl<T>(logits_NX, Tensor(), global_scale, params, topk_idx_Nk, weights_NW, true);
  });
}

void router_backward(const DeviceContext& ctx, const Tensor& logits_NX, const Tensor& topk_idx_Nk,
                     const Tensor& weights_NW, const Tensor& global_scale, const RouterParams& params,
                     const Tensor& dweights_NW, const Tensor& dlogits_NX, const Tensor& dglobal_scale) {
  if (ctx.device == Device::CUDA) return cuda_op(ctx, &OpTable::router_backward, "router_backward")(ctx, logits_NX, topk_idx_Nk, weights_NW, global_scale, params, dweights_NW, dlogits_NX, dglobal_scale);
  const char* op = "router_backward";
  require_cpu(op, ctx);
  check_router_tensors(op, logits_NX, topk_idx_Nk, weights_NW, global_scale, params);
  require_shape(op, "dweights_NW", dweights_NW, weights_NW.shape());
  require_dtype(op, "dweights_NW", dweights_NW, logits_NX.dtype());
  require_shape(op, "dlogits_NX", dlogits_NX, logits_NX.shape());
  require_dtype(op, "dlogits_NX", dlogits_NX, logits_NX.dtype());
  require_shape(op, "dglobal_scale", dglobal_scale, {1});
  require_dtype(op, "dglobal_scale", dglobal_scale, logits_NX.dtype());
  check_topk_range(op, topk_idx_Nk, params.n_routed);
  dispatch_float(op, logits_NX, [&]<typename T>() {
    backward_impl<T>(logits_NX, topk_idx_Nk, global_scale, params, dweights_NW, dlogits_NX, dglobal_scale);
  });
}

}  // namespace quill::ops
