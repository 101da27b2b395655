// CPU reference of the routed-expert token plumbing: the route plan, token permutation and the
// grouped (per-expert) linear.
//
// Legend: N tokens, k = top_k slots per token, E experts, P = N * k permuted rows, D the hidden
// width, K/M the input/output width of a grouped linear. An assignment a = token * k + slot.
//   moe_route_plan: sorts the assignments stably by (expert, token, slot) (a counting sort): slot_rows_Nk
//     holds each assignment's row p(t, slot) in that order, counts_E the rows per expert.  topk I32,
//     slot_rows I32 [N, k], counts I64 in host memory.
//   moe_permute: xp[p(t, slot)] = x[t];  backward: dx[t] = sum_slot dxp[p(t, slot)], in slot order.
//   moe_unpermute: out[t] = sum_slot w[t, slot] * yp[p(t, slot)];
//     backward: dyp[p(t, slot)] = w[t, slot] * dout[t],  dw[t, slot] = dout[t] . yp[p(t, slot)].
//   grouped_linear: for expert e, rows [off_e, off_e + counts[e]) of y = x * w[e]^T, off_e the
//     prefix sum of counts; as ops/linear.h, dx is overwritten and dw accumulated.
// slot_rows must be a permutation of [0, N * k) and sum(counts) must be P; anything else is an error.
// Float tensors (x, w, y and their gradients, weights) share one dtype, F32 or F64; dot products
// accumulate in double.
#include "ops/moe.h"
#include "ops/op_table.h"

#include <algorithm>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "ops/dispatch.h"
#include "ops/convert.h"
#include "ops/gather_rows.h"

namespace quill::ops {
namespace {

using namespace quill::ops_detail;

void require_2d(const char* op, const char* name, const Tensor& t) {
  QUILL_CHECK(t.defined() && t.ndim() == 2, "{}: {} must be 2-D, got {}", op, name,
              t.defined() ? shape_str(t.shape()) : std::string("(undefined)"));
}

void require_same_float(const char* op, const char* name, const Tensor& t, const Tensor& like) {
  require_dtype(op, name, t, like.dtype());
}

// slot_rows_Nk must be an I32 [n_tokens, k] permutation of the N * k rows (k given when known, else -1);
// returns k.
int64_t check_slot_rows(const char* op, const Tensor& slot_rows_Nk, int64_t n_tokens, int64_t known_k = -1) {
  const int64_t k = require_slot_rows(op, slot_rows_Nk, n_tokens, known_k);
  const int64_t P = n_tokens * k;
  const int32_t* rows = slot_rows_Nk.data_as<int32_t>();
  std::vector<char> seen(static_cast<size_t>(P), 0);
  for (int64_t a = 0; a < P; ++a) {
    const int64_t p = rows[a];
    QUILL_CHECK(p >= 0 && p < P, "{}: slot_rows_Nk[{}, {}] is row {}, outside [0, {})", op, a / k, a % k, p, P);
    QUILL_CHECK(!seen[p], "{}: slot_rows_Nk[{}, {}] repeats row {}", op, a / k, a % k, p);
    seen[p] = 1;
  }
  return k;
}

// counts_E must be I64 host memory, non-negative and sum to `rows`; returns E.
int64_t check_counts(const char* op, const Tensor& counts_E, int64_t rows) {
  ops_detail::require_group_counts(op, counts_E, rows);
  return counts_E.numel();
}

template <typename T>
void permute_impl(const Tensor& x_ND, const Tensor& slot_rows_Nk, const Tensor& xp_PD) {
  const int64_t P = slot_rows_Nk.numel(), k = slot_rows_Nk.dim(1), D = x_ND.dim(1);
  const int32_t* rows = slot_rows_Nk.data_as<int32_t>();
  const T* x = x_ND.data_as<T>();
  T* xp = xp_PD.data_as<T>();
  for (int64_t a = 0; a < P; ++a) std::copy_n(x + (a / k) * D, D, xp + rows[a] * D);
}

template <typename T>
void permute_backward_impl(const Tensor& dxp_PD, const Tensor& slot_rows_Nk, const Tensor& dx_ND) {
  const int64_t P = slot_rows_Nk.numel(), k = slot_rows_Nk.dim(1), D = dx_ND.dim(1);
  const int32_t* rows = slot_rows_Nk.data_as<int32_t>();
  const T* dxp = dxp_PD.data_as<T>();
  T* dx = dx_ND.data_as<T>();
  std::fill(dx, dx + dx_ND.numel(), T(0));
  for (int64_t a = 0; a < P; ++a) {  // token by token, slots in order
    T* row = dx + (a / k) * D;
    const T* src = dxp + rows[a] * D;
    for (int64_t d = 0; d < D; ++d) row[d] += src[d];
  }
}

template <typename T>
void unpermute_impl(const Tensor& yp_PD, const Tensor& slot_rows_Nk, const Tensor& weights_Nk, const Tensor& out_ND) {
  const int64_t D = out_ND.dim(1), N = out_ND.dim(0), k = weights_Nk.dim(1);
  const int32_t* rows = slot_rows_Nk.data_as<int32_t>();
  const T* yp = yp_PD.data_as<T>();
  const T* w = weights_Nk.data_as<T>();
  // Sum per token in double, in slot order.
  std::vector<double> acc(static_cast<size_t>(D));
  T* out = out_ND.data_as<T>();
  for (int64_t t = 0; t < N; ++t) {
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int64_t s = 0; s < k; ++s) {
      const double ws = w[t * k + s];
      const T* y = yp + static_cast<int64_t>(rows[t * k + s]) * D;
      for (int64_t d = 0; d < D; ++d) acc[d] += ws * y[d];
    }
    for (int64_t d = 0; d < D; ++d) out[t * D + d] = static_cast<T>(acc[d]);
  }
}

template <typename T>
void unpermute_backward_impl(const Tensor& dout_ND, const Tensor& yp_PD, const Tensor& slot_rows_Nk,
                             const Tensor& weights_Nk, const Tensor& dyp_PD, const Tensor& dweights_Nk) {
  const int64_t P = slot_rows_Nk.numel(), D = dout_ND.dim(1), k = weights_Nk.dim(1);
  const int32_t* rows = slot_rows_Nk.data_as<int32_t>();
  const T* dout = dout_ND.data_as<T>();
  const T* yp = yp_PD.data_as<T>();
  const T* w = weights_Nk.data_as<T>();
  T* dyp = dyp_PD.data_as<T>();
  T* dw = dweights_Nk.data_as<T>();
  for (int64_t a = 0; a < P; ++a) {
    const int64_t p = rows[a];
    const T* g = dout + (a / k) * D;
    const T* y = yp + p * D;
    double acc = 0;
    for (int64_t d = 0; d < D; ++d) {
      dyp[p * D + d] = w[a] * g[d];
      acc += static_cast<double>(g[d]) * y[d];
    }
    dw[a] = static_cast<T>(acc);
  }
}

// y[off_e + r] = x[off_e + r] * w[e]^T for every expert e and its rows r.
template <typename T>
void grouped_forward_impl(const Tensor& x_PK, const Tensor& w_EMK, const int64_t* counts, const Tensor& y_PM) {
  const int64_t E = w_EMK.dim(0), M = w_EMK.dim(1), K = w_EMK.dim(2);
  const T* x = x_PK.data_as<T>();
  const T* w = w_EMK.data_as<T>();
  T* y = y_PM.data_as<T>();
  int64_t row = 0;
  for (int64_t e = 0; e < E; ++e) {
    const T* we = w + e * M * K;
    for (int64_t r = row; r < row + counts[e]; ++r)
      for (int64_t m = 0; m < M; ++m) {
        double acc = 0;
        for (int64_t j = 0; j < K; ++j) acc += static_cast<double>(x[r * K + j]) * we[m * K + j];
        y[r * M + m] = static_cast<T>(acc);
      }
    row += counts[e];
  }
}

// dx[off_e + r] = dy[off_e + r] * w[e] (overwritten).
template <typename T>
void grouped_backward_input_impl(const Tensor& dy_PM, const Tensor& w_EMK, const int64_t* counts,
                                 const Tensor& dx_PK) {
  const int64_t E = w_EMK.dim(0), M = w_EMK.dim(1), K = w_EMK.dim(2);
  const T* dy = dy_PM.data_as<T>();
  const T* w = w_EMK.data_as<T>();
  T* dx = dx_PK.data_as<T>();
  int64_t row = 0;
  for (int64_t e = 0; e < E; ++e) {
    const T* we = w + e * M * K;
    for (int64_t r = row; r < row + counts[e]; ++r)
      for (int64_t j = 0; j < K; ++j) {
        double acc = 0;
        for (int64_t m = 0; m < M; ++m) acc += static_cast<double>(dy[r * M + m]) * we[m * K + j];
        dx[r * K + j] = static_cast<T>(acc);
      }
    row += counts[e];
  }
}

// dw[e] += dy[rows of e]^T * x[rows of e] (accumulated).
template <typename T>
void grouped_backward_weight_impl(const Tensor& dy_PM, const Tensor& x_PK, const int64_t* counts,
                                  const Tensor& dw_EMK, bool accumulate) {
  const int64_t E = dw_EMK.dim(0), M = dw_EMK.dim(1), K = dw_EMK.dim(2);
  const T* dy = dy_PM.data_as<T>();
  const T* x = x_PK.data_as<T>();
  T* dw = dw_EMK.data_as<T>();
  int64_t row = 0;
  for (int64_t e = 0; e < E; ++e) {
    T* dwe = dw + e * M * K;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t j = 0; j < K; ++j) {
        double acc = 0;
        for (int64_t r = row; r < row + counts[e]; ++r) acc += static_cast<double>(dy[r * M + m]) * x[r * K + j];
        dwe[m * K + j] = (accumulate ? dwe[m * K + j] : T(0)) + static_cast<T>(acc);
      }
    row += counts[e];
  }
}

// Sizes of a grouped linear: P rows, E experts of [M, K] weights.
struct GroupedDims {
  int64_t P, E, M, K;
};

GroupedDims check_grouped_w(const char* op, const char* w_name, const Tensor& w_EMK) {
  QUILL_CHECK(w_EMK.defined() && w_EMK.ndim() == 3, "{}: {} must be 3-D [E, M, K], got {}", op, w_name,
              w_EMK.defined() ? shape_str(w_EMK.shape()) : std::string("(undefined)"));
  return GroupedDims{0, w_EMK.dim(0), w_EMK.dim(1), w_EMK.dim(2)};
}

}  // namespace

void moe_route_plan(const DeviceContext& ctx, const Tensor& topk_idx_Nk, int64_t n_experts, const Tensor& slot_rows_Nk,
                    const Tensor& counts_E) {
  if (ctx.device == Device::CUDA) return cuda_op(ctx, &OpTable::moe_route_plan, "moe_route_plan")(ctx, topk_idx_Nk, n_experts, slot_rows_Nk, counts_E);
  const char* op = "moe_route_plan";
  require_cpu(op, ctx);
  require_2d(op, "topk_idx_Nk", topk_idx_Nk);
  require_dtype(op, "topk_idx_Nk", topk_idx_Nk, DType::I32);
  QUILL_CHECK(n_experts > 0, "{}: n_experts is {}, expected > 0", op, n_experts);
  const int64_t P = topk_idx_Nk.numel();
  QUILL_CHECK(P <= std::numeric_limits<int32_t>::max(), "{}: {} assignments do not fit the I32 slot_rows_Nk", op, P);
  require_shape(op, "slot_rows_Nk", slot_rows_Nk, topk_idx_Nk.shape());
  require_dtype(op, "slot_rows_Nk", slot_rows_Nk, DType::I32);
  const bool deferred = counts_E.defined() && counts_E.ndim() == 1 && counts_E.dim(0) == n_experts + 1;
  require_shape(op, "counts_E", counts_E, {deferred ? n_experts + 1 : n_experts});
  require_dtype(op, "counts_E", counts_E, DType::I64);
  QUILL_CHECK(counts_E.device() == Device::CPU, "{}: counts_E must be in host memory", op);

  const int32_t* topk = topk_idx_Nk.data_as<int32_t>();
  int64_t* counts = counts_E.data_as<int64_t>();
  std::fill(counts, counts + n_experts, int64_t{0});
  if (deferred) counts[n_experts] = kRoutePlanAllInRange;
  for (int64_t a = 0; a < P; ++a) {
    if (topk[a] < 0 || topk[a] >= n_experts) {
      if (!deferred) moe_route_plan_check(ctx, topk_idx_Nk, n_experts, a);  // names it
      std::fill(counts, counts + n_experts, int64_t{0});  // the check word, zero counts, no rows (as the GPU)
      counts[n_experts] = a;
      return;
    }
    ++counts[topk[a]];
  }
  // Counting sort: visiting assignments in order keeps (token, slot) order within each expert.
  std::vector<int64_t> next(static_cast<size_t>(n_experts));
  for (int64_t e = 0, off = 0; e < n_experts; ++e) {
    next[e] = off;
    off += counts[e];
  }
  int32_t* rows = slot_rows_Nk.data_as<int32_t>();
  for (int64_t a = 0; a < P; ++a) rows[a] = static_cast<int32_t>(next[topk[a]]++);
}

void moe_route_plan_check(const DeviceContext& ctx, const Tensor& topk_idx_Nk, int64_t n_experts, int64_t check_word) {
  if (check_word == kRoutePlanAllInRange) return;
  const int64_t k = topk_idx_Nk.dim(1);
  QUILL_CHECK(check_word >= 0 && check_word < topk_idx_Nk.numel(), "moe_route_plan: check word {} names no assignment",
              check_word);
  Tensor expert = Tensor::empty({1}, DType::I32);
  ops::transfer(ctx, topk_idx_Nk.reshape({topk_idx_Nk.numel()}).rows(check_word, check_word + 1), expert);
  QUILL_FAIL("moe_route_plan: topk_idx_Nk[{}, {}] is expert {}, outside [0, {})", check_word / k, check_word % k,
             expert.data_as<int32_t>()[0], n_experts);
}

void moe_permute(const DeviceContext& ctx, const Tensor& x_ND, const Tensor& slot_rows_Nk, const Tensor& xp_PD) {
  if (ctx.device == Device::CUDA) return cuda_op(ctx, &OpTable::moe_permute, "moe_permute")(ctx, x_ND, slot_rows_Nk, xp_PD);
  const char* op = "moe_permute";
  require_cpu(op, ctx);
  require_2d(op, "x_ND", x_ND);
  const int64_t N = x_ND.dim(0), D = x_ND.dim(1);
  const int64_t k = check_slot_rows(op, slot_rows_Nk, N);
  require_shape(op, "xp_PD", xp_PD, {N * k, D});
  require_same_float(op, "xp_PD", xp_PD, x_ND);
  dispatch_float(op, x_ND, [&]<typename T>() { permute_impl<T>(x_ND, slot_rows_Nk, xp_PD); });
}

void moe_permute_backward(const DeviceContext& ctx, const Tensor& dxp_PD, const Tensor& slot_rows_Nk,
                          const Tensor& dx_ND) {
  if (ctx.device == Device::CUDA) return cuda_op(ctx, &OpTable::moe_permute_backward, "moe_permute_backward")(ctx, dxp_PD, slot_rows_Nk, dx_ND);
  const char* op = "moe_permute_backward";
  require_cpu(op, ctx);
  require_2d(op, "dx_ND", dx_ND);
  const int64_t N = dx_ND.dim(0), D = dx_ND.dim(1);
  const int64_t k = check_slot_rows(op, slot_rows_Nk, N);
  require_shape(op, "dxp_PD", dxp_PD, {N * k, D});
  require_same_float(op, "dxp_PD", dxp_PD, dx_ND);
  dispatch_float(op, dx_ND, [&]<typename T>() { permute_backward_impl<T>(dxp_PD, slot_rows_Nk, dx_ND); });
}

void moe_unpermute(const DeviceContext& ctx, const Tensor& yp_PD, const Tensor& slot_rows_Nk, const Tensor& weights_Nk,
                   const Tensor& out_ND) {
  if (ctx.device == Device::CUDA) return cuda_op(ctx, &OpTable::moe_unpermute, "moe_unpermute")(ctx, yp_PD, slot_rows_Nk, weights_Nk, out_ND);
  const char* op = "moe_unpermute";
  require_cpu(op, ctx);
  require_2d(op, "weights_Nk", weights_Nk);
  require_2d(op, "out_ND", out_ND);
  const int64_t N = weights_Nk.dim(0), k = weights_Nk.dim(1), D = out_ND.dim(1);
  check_slot_rows(op, slot_rows_Nk, N, k);
  require_shape(op, "yp_PD", yp_PD, {N * k, D});
  require_shape(op, "out_ND", out_ND, {N, D});
  require_same_float(op, "weights_Nk", weights_Nk, yp_PD);
  require_same_float(op, "out_ND", out_ND, yp_PD);
  dispatch_float(op, yp_PD, [&]<typename T>() { unpermute_impl<T>(yp_PD, slot_rows_Nk, weights_Nk, out_ND); });
}

void moe_unpermute_backward(const DeviceContext& ctx, const Tensor& dout_ND, const Tensor& yp_PD,
                            const Tensor& slot_rows_Nk, const Tensor& weights_Nk, const Tensor& dyp_PD,
                            const Tensor& dweights_Nk) {
  if (ctx.device == Device::CUDA) return cuda_op(ctx, &OpTable::moe_unpermute_backward, "moe_unpermute_backward")(ctx, dout_ND, yp_PD, slot_rows_Nk, weights_Nk, dyp_PD, dweights_Nk);
  const char* op = "moe_unpermute_backward";
  require_cpu(op, ctx);
  require_2d(op, "weights_Nk", weights_Nk);
  require_2d(op, "dout_ND", dout_ND);
  const int64_t N = weights_Nk.dim(0), k = weights_Nk.dim(1), D = dout_ND.dim(1);
  check_slot_rows(op, slot_rows_Nk, N, k);
  require_shape(op, "dout_ND", dout_ND, {N, D});
  require_shape(op, "yp_PD", yp_PD, {N * k, D});
  require_shape(op, "dyp_PD", dyp_PD, {N * k, D});
  require_shape(op, "dweights_Nk", dweights_Nk, {N, k});
  for (auto [name, t] : {std::pair<const char*, const Tensor*>{"yp_PD", &yp_PD}, {"weights_Nk", &weights_Nk},
                         {"dyp_PD", &dyp_PD}, {"dweights_Nk", &dweights_Nk}})
    require_same_float(op, name, *t, dout_ND);
  dispatch_float(op, dout_ND, [&]<typename T>() {
    unpermute_backward_impl<T>(dout_ND, yp_PD, slot_rows_Nk, weights_Nk, dyp_PD, dweights_Nk);
  });
}

void grouped_linear_forward(const DeviceContext& ctx, const Tensor& x_PK, const Tensor& w_EMK, const Tensor& counts_E,
                            const Tensor& y_PM) {
  if (ctx.device == Device::CUDA) return cuda_op(ctx, &OpTable::grouped_linear_forward, "grouped_linear_forward")(ctx, x_PK, w_EMK, counts_E, y_PM);
  const char* op = "grouped_linear_forward";
  require_cpu(op, ctx);
  GroupedDims g = check_grouped_w(op, "w_EMK", w_EMK);
  require_2d(op, "x_PK", x_PK);
  g.P = x_PK.dim(0);
  require_shape(op, "x_PK", x_PK, {g.P, g.K});
  require_shape(op, "y_PM", y_PM, {g.P, g.M});
  require_shape(op, "counts_E", counts_E, {g.E});
  check_counts(op, counts_E, g.P);
  require_same_float(op, "w_EMK", w_EMK, x_PK);
  require_same_float(op, "y_PM", y_PM, x_PK);
  dispatch_float(op, x_PK, [&]<typename T>() {
    grouped_forward_impl<T>(x_PK, w_EMK, counts_E.data_as<int64_t>(), y_PM);
  });
}

void grouped_linear_backward_input(const DeviceContext& ctx, const Tensor& dy_PM, const Tensor& w_EMK,
                                   const Tensor& counts_E, const Tensor& dx_PK) {
  if (ctx.device == Device::CUDA) return cuda_op(ctx, &OpTable::grouped_linear_backward_input, "grouped_linear_backward_input")(ctx, dy_PM, w_EMK, counts_E, dx_PK);
  const char* op = "grouped_linear_backward_input";
  require_cpu(op, ctx);
  GroupedDims g = check_grouped_w(op, "w_EMK", w_EMK);
  require_2d(op, "dy_PM", dy_PM);
  g.P = dy_PM.dim(0);
  require_shape(op, "dy_PM", dy_PM, {g.P, g.M});
  require_shape(op, "dx_PK", dx_PK, {g.P, g.K});
  require_shape(op, "counts_E", counts_E, {g.E});
  check_counts(op, counts_E, g.P);
  require_same_float(op, "w_EMK", w_EMK, dy_PM);
  require_same_float(op, "dx_PK", dx_PK, dy_PM);
  dispatch_float(op, dy_PM, [&]<typename T>() {
    grouped_backward_input_impl<T>(dy_PM, w_EMK, counts_E.data_as<int64_t>(), dx_PK);
  });
}

void grouped_linear_backward_weight(const DeviceContext& ctx, const Tensor& dy_PM, const Tensor& x_PK,
                                    const Tensor& counts_E, const Tensor& dw_EMK, bool accumulate) {
  if (ctx.device == Device::CUDA) return cuda_op(ctx, &OpTable::grouped_linear_backward_weight, "grouped_linear_backward_weight")(ctx, dy_PM, x_PK, counts_E, dw_EMK, accumulate);
  const char* op = "grouped_linear_backward_weight";
  require_cpu(op, ctx);
  GroupedDims g = check_grouped_w(op, "dw_EMK", dw_EMK);
  require_2d(op, "dy_PM", dy_PM);
  g.P = dy_PM.dim(0);
  require_shape(op, "dy_PM", dy_PM, {g.P, g.M});
  require_shape(op, "x_PK", x_PK, {g.P, g.K});
  require_shape(op, "counts_E", counts_E, {g.E});
  check_counts(op, counts_E, g.P);
  require_same_float(op, "x_PK", x_PK, dy_PM);
  require_same_float(op, "dw_EMK", dw_EMK, dy_PM);
  dispatch_float(op, dy_PM, [&]<typename T>() {
    grouped_backward_weight_impl<T>(dy_PM, x_PK, counts_E.data_as<int64_t>(), dw_EMK, accumulate);
  });
}

void grouped_linear_backward_weight_pair(const DeviceContext& ctx, const Tensor& dy_a_PM, const Tensor& x_a_PK,
                                         const Tensor& counts_a_E, const Tensor& dy_b_PM, const Tensor& x_b_PK,
                                         const Tensor& counts_b_E, const Tensor& dw_EMK, bool accumulate) {
  if (ctx.device == Device::CUDA)
    return cuda_op(ctx, &OpTable::grouped_linear_backward_weight_pair, "grouped_linear_backward_weight_pair")(
        ctx, dy_a_PM, x_a_PK, counts_a_E, dy_b_PM, x_b_PK, counts_b_E, dw_EMK, accumulate);
  require_cpu("grouped_linear_backward_weight_pair", ctx);
  ops_detail::merged_backward_weight_pair(ctx, dy_a_PM, x_a_PK, counts_a_E, dy_b_PM, x_b_PK, counts_b_E, dw_EMK,
                                          accumulate);
}

}  // namespace quill::ops

namespace quill::ops_detail {

void merged_backward_weight_pair(const DeviceContext& ctx, const Tensor& dy_a_PM, const Tensor& x_a_PK,
                                 const Tensor& counts_a_E, const Tensor& dy_b_PM, const Tensor& x_b_PK,
                                 const Tensor& counts_b_E, const Tensor& dw_EMK, bool accumulate) {
  // The index (on a GPU), then the merged dy and x, live to the GEMM's end: what the memory plan replays.
  const ops::MergedExpertRows m = ops::merge_expert_rows(ctx, dy_a_PM, x_a_PK, counts_a_E, dy_b_PM, x_b_PK, counts_b_E);
  ops::grouped_linear_backward_weight(ctx, m.dy, m.x, m.counts, dw_EMK, accumulate);
}

}  // namespace quill::ops_detail
