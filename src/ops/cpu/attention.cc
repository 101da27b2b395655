// CPU reference of Inkling attention (the eager path of Hugging Face InklingAttention), forward and
// backward, in float (the model's reference) or double (the gradient tests).
//
// Legend: T positions of one sequence, H query heads, G kv heads (H % G == 0, query head h reads kv
// head g = h / (H/G)), d head dim, R rank of the relative bias, E its extent (table columns).
//   q_THd [T, H, d], k_TGd / v_TGd [T, G, d]   (q and k already RMS-normed per head by the caller)
//   r_THR [T, H, R], table_RE [R, E]
//   out_THd [T, H, d], lse_HT [H, T]
//
// Math, for query t of head h and an allowed key s (s <= t and, when window > 0, t - s < window):
//   bias(t, s, h)  = sum_i r[t, h, i] * table[i, t - s]   if t - s < E, else 0 (the mask is independent of E)
//   tau(t)         = 1 + alpha * ln(max((t + 1) / n_floor, 1))   (log scaling on; else 1)
//   score(t, s, h) = tau(t) * (scale * q[t, h] . k[s, g] + bias(t, s, h))
//   P(t, s, h)     = exp(score - lse[h, t]),  lse[h, t] = log sum_s exp(score)   (max subtracted first)
//   out[t, h]      = sum_s P * v[s, g]
// Backward (flash style: P is recomputed from lse, nothing of size T x T is stored):
//   dP = dout[t, h] . v[s, g],  D_t = dout[t, h] . out[t, h],  dS = P * (dP - D_t)
//   dv[s, g] += P * dout[t, h]
//   dq[t, h] += tau * scale * dS * k[s, g],  dk[s, g] += tau * scale * dS * q[t, h]
//   dr[t, h, i] += tau * dS * table[i, t - s],  dtable[i, t - s] += tau * dS * r[t, h, i]   (t - s < E)
// dq, dk, dv, dr are overwritten; dtable is accumulated (the caller zeroes it once per step), or left out when
// the caller passes none (a frozen table).
//
// Only keys inside the window are visited, so a local layer costs O(T * window), a global one
// O(T^2 / 2). Arithmetic runs in the element type; tau is computed in double and rounded once.
// Preconditions: every tensor on the CPU, contiguous, one dtype (F32 or F64); outputs do not alias inputs.
#include "ops/attention.h"
#include "ops/op_table.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "ops/dispatch.h"

namespace quill::ops {
namespace {

struct Dims {
  int64_t T, H, G, d, R, E;
};

std::string describe_or_undefined(const Tensor& t) { return t.defined() ? t.describe() : std::string("(undefined)"); }

void require_rank(const char* op, const char* name, const Tensor& t, int rank, const char* layout) {
  QUILL_CHECK(t.defined() && t.ndim() == rank, "{}: {} must be {}, got {}", op, name, layout,
              describe_or_undefined(t));
  QUILL_CHECK(t.device() == Device::CPU, "{}: {} lives on {}, the CPU reference needs it on cpu", op, name,
              device_name(t.device()));
}

// Checks the five inputs and the parameters; returns the sizes read from them.
Dims check_inputs(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& r,
                  const Tensor& table, const AttentionParams& params) {
  require_rank(op, "q_THd", q, 3, "[T, H, d]");
  require_rank(op, "k_TGd", k, 3, "[T, G, d]");
  require_rank(op, "r_THR", r, 3, "[T, H, R]");
  require_rank(op, "table_RE", table, 2, "[R, E]");
  Dims n{q.dim(0), q.dim(1), k.dim(1), q.dim(2), r.dim(2), table.dim(1)};
  QUILL_CHECK(n.G > 0 && n.H % n.G == 0, "{}: q_THd has {} heads, not a multiple of k_TGd's {} kv heads", op, n.H,
              n.G);
  ops_detail::require_shape(op, "k_TGd", k, {n.T, n.G, n.d});
  ops_detail::require_shape(op, "v_TGd", v, {n.T, n.G, n.d});
  QUILL_CHECK(v.device() == Device::CPU, "{}: v_TGd lives on {}, the CPU reference needs it on cpu", op,
              device_name(v.device()));
  ops_detail::require_shape(op, "r_THR", r, {n.T, n.H, n.R});
  ops_detail::require_shape(op, "table_RE", table, {n.R, n.E});
  ops_detail::require_dtype(op, "k_TGd", k, q.dtype());
  ops_detail::require_dtype(op, "v_TGd", v, q.dtype());
  ops_detail::require_dtype(op, "r_THR", r, q.dtype());
  ops_detail::require_dtype(op, "table_RE", table, q.dtype());
  QUILL_CHECK(params.window >= 0, "{}: window must be >= 0 (0 = full causal), got {}", op, params.window);
  QUILL_CHECK(std::isfinite(params.scale), "{}: scale must be finite, got {}", op, params.scale);
  QUILL_CHECK(!params.log_scaling || (params.log_floor > 0 && std::isfinite(params.log_alpha)),
              "{}: log scaling needs log_floor > 0 and a finite log_alpha, got {} and {}", op, params.log_floor,
              params.log_alpha);
  return n;
}

// Checks an output or gradient tensor against the shape and dtype it must have.
void check_result(const char* op, const char* name, const Tensor& t, const Shape& shape, DType dtype) {
  ops_detail::require_shape(op, name, t, shape);
  ops_detail::require_dtype(op, name, t, dtype);
  QUILL_CHECK(t.device() == Device::CPU, "{}: {} lives on {}, the CPU reference needs it on cpu", op, name,
              device_name(t.device()));
}

double tau_at(const AttentionParams& p, int64_t t) {
  if (!p.log_scaling) return 1.0;
  return 1.0 + p.log_alpha * std::log(std::max(static_cast<double>(t + 1) / p.log_floor, 1.0));
}

int64_t first_key(const AttentionParams& p, int64_t t) {
  return p.window > 0 ? std::max<int64_t>(0, t - p.window + 1) : 0;
}

template <typename T>
T dot_n(const T* a, const T* b, int64_t n) {
  T s = 0;
  for (int64_t c = 0; c < n; ++c) s += a[c] * b[c];
  return s;
}

// The pre-softmax score of query t (row q_t, bias row r_t) against key s.
template <typename T>
T score_at(const Dims& n, const T* q_t, const T* k_s, const T* r_t, const T* table, int64_t dist, T scale, T tau) {
  T bias = 0;
  if (dist < n.E)
    for (int64_t i = 0; i < n.R; ++i) bias += r_t[i] * table[i * n.E + dist];
  return tau * (scale * dot_n(q_t, k_s, n.d) + bias);
}

template <typename T>
void forward_impl(const Dims& n, const AttentionParams& p, const T* q, const T* k, const T* v, const T* r,
                  const T* table, T* out, T* lse) {
  const int64_t rep = n.H / n.G;
  const T scale = static_cast<T>(p.scale);
  std::vector<T> w(static_cast<size_t>(n.T));  // scores, then unnormalised weights, of one query
  for (int64_t h = 0; h < n.H; ++h) {
    const int64_t g = h / rep;
    for (int64_t t = 0; t < n.T; ++t) {
      const T tau = static_cast<T>(tau_at(p, t));
      const T* q_t = q + (t * n.H + h) * n.d;
      const T* r_t = r + (t * n.H + h) * n.R;
      const int64_t s0 = first_key(p, t);
      T m = -std::numeric_limits<T>::infinity();
      for (int64_t s = s0; s <= t; ++s) {
        w[s - s0] = score_at(n, q_t, k + (s * n.G + g) * n.d, r_t, table, t - s, scale, tau);
        m = std::max(m, w[s - s0]);
      }
      T sum = 0;
      for (int64_t s = s0; s <= t; ++s) sum += (w[s - s0] = std::exp(w[s - s0] - m));
      T* o_t = out + (t * n.H + h) * n.d;
      std::fill(o_t, o_t + n.d, T(0));
      for (int64_t s = s0; s <= t; ++s) {
        const T a = w[s - s0] / sum;
        const T* v_s = v + (s * n.G + g) * n.d;
        for (int64_t c = 0; c < n.d; ++c) o_t[c] += a * v_s[c];
      }
      lse[h * n.T + t] = m + std::log(sum);
    }
  }
}

template <typename T>
void backward_impl(const Dims& n, const AttentionParams& p, const T* q, const T* k, const T* v, const T* r,
                   const T* table, const T* out, const T* lse, const T* dout, T* dq, T* dk, T* dv, T* dr,
                   T* dtable) {
  const int64_t rep = n.H / n.G;
  const T scale = static_cast<T>(p.scale);
  std::fill(dq, dq + n.T * n.H * n.d, T(0));
  std::fill(dk, dk + n.T * n.G * n.d, T(0));
  std::fill(dv, dv + n.T * n.G * n.d, T(0));
  std::fill(dr, dr + n.T * n.H * n.R, T(0));
  for (int64_t h = 0; h < n.H; ++h) {
    const int64_t g = h / rep;
    for (int64_t t = 0; t < n.T; ++t) {
      const T tau = static_cast<T>(tau_at(p, t));
      const int64_t row = t * n.H + h;
      const T* q_t = q + row * n.d;
      const T* r_t = r + row * n.R;
      const T* do_t = dout + row * n.d;
      T* dq_t = dq + row * n.d;
      T* dr_t = dr + row * n.R;
      const T lse_t = lse[h * n.T + t];
      const T D = dot_n(do_t, out + row * n.d, n.d);
      for (int64_t s = first_key(p, t); s <= t; ++s) {
        const int64_t dist = t - s;
        const T* k_s = k + (s * n.G + g) * n.d;
        const T* v_s = v + (s * n.G + g) * n.d;
        const T P = std::exp(score_at(n, q_t, k_s, r_t, table, dist, scale, tau) - lse_t);
        const T dS = P * (dot_n(do_t, v_s, n.d) - D);
        T* dv_s = dv + (s * n.G + g) * n.d;
        for (int64_t c = 0; c < n.d; ++c) dv_s[c] += P * do_t[c];
        // tau multiplies both the q.k term and the bias.
        const T dz = tau * dS;
        const T dqk = dz * scale;
        T* dk_s = dk + (s * n.G + g) * n.d;
        for (int64_t c = 0; c < n.d; ++c) {
          dq_t[c] += dqk * k_s[c];
          dk_s[c] += dqk * q_t[c];
        }
        if (dist < n.E) {
          for (int64_t i = 0; i < n.R; ++i) dr_t[i] += dz * table[i * n.E + dist];
          if (dtable != nullptr)
            for (int64_t i = 0; i < n.R; ++i) dtable[i * n.E + dist] += dz * r_t[i];
        }
      }
    }
  }
}

}  // namespace

void attention_forward(const DeviceContext& ctx, const Tensor& q_THd, const Tensor& k_TGd, const Tensor& v_TGd,
                       const Tensor& r_THR, const Tensor& table_RE, const AttentionParams& params,
                       const Tensor& out_THd, const Tensor& lse_HT) {
  if (ctx.device == Device::CUDA) return cuda_op(ctx, &OpTable::attention_forward, "attention_forward")(ctx, q_THd, k_TGd, v_TGd, r_THR, table_RE, params, out_THd, lse_HT);
  const char* op = "attention_forward";
  ops_detail::require_cpu(op, ctx);
  const Dims n = check_inputs(op, q_THd, k_TGd, v_TGd, r_THR, table_RE, params);
  check_result(op, "out_THd", out_THd, {n.T, n.H, n.d}, q_THd.dtype());
  check_result(op, "lse_HT", lse_HT, {n.H, n.T}, q_THd.dtype());
  ops_detail::dispatch_float(op, q_THd, [&]<typename T>() {
    forward_impl<T>(n, params, q_THd.data_as<T>(), k_TGd.data_as<T>(), v_TGd.data_as<T>(), r_THR.data_as<T>(),
                    table_RE.data_as<T>(), out_THd.data_as<T>(), lse_HT.data_as<T>());
  });
}

void attention_backward(const DeviceContext& ctx, const Tensor& q_THd, const Tensor& k_TGd, const Tensor& v_TGd,
                        const Tensor& r_THR, const Tensor& table_RE, const AttentionParams& params,
                        const Tensor& out_THd, const Tensor& lse_HT, const Tensor& dout_THd, const Tensor& dq_THd,
                        const Tensor& dk_TGd, const Tensor& dv_TGd, const Tensor& dr_THR, const Tensor& dtable_RE) {
  if (ctx.device == Device::CUDA) return cuda_op(ctx, &OpTable::attention_backward, "attention_backward")(ctx, q_THd, k_TGd, v_TGd, r_THR, table_RE, params, out_THd, lse_HT, dout_THd, dq_THd, dk_TGd, dv_TGd, dr_THR, dtable_RE);
  const char* op = "attention_backward";
  ops_detail::require_cpu(op, ctx);
  const Dims n = check_inputs(op, q_THd, k_TGd, v_TGd, r_THR, table_RE, params);
  const DType dt = q_THd.dtype();
  check_result(op, "out_THd", out_THd, {n.T, n.H, n.d}, dt);
  check_result(op, "lse_HT", lse_HT, {n.H, n.T}, dt);
  check_result(op, "dout_THd", dout_THd, {n.T, n.H, n.d}, dt);
  check_result(op, "dq_THd", dq_THd, {n.T, n.H, n.d}, dt);
  check_result(op, "dk_TGd", dk_TGd, {n.T, n.G, n.d}, dt);
  check_result(op, "dv_TGd", dv_TGd, {n.T, n.G, n.d}, dt);
  check_result(op, "dr_THR", dr_THR, {n.T, n.H, n.R}, dt);
  if (dtable_RE.defined()) check_result(op, "dtable_RE", dtable_RE, {n.R, n.E}, dt);
  ops_detail::dispatch_float(op, q_THd, [&]<typename T>() {
    backward_impl<T>(n, params, q_THd.data_as<T>(), k_TGd.data_as<T>(), v_TGd.data_as<T>(), r_THR.data_as<T>(),
                     table_RE.data_as<T>(), out_THd.data_as<T>(), lse_HT.data_as<T>(), dout_THd.data_as<T>(),
                     dq_THd.data_as<T>(), dk_TGd.data_as<T>(), dv_TGd.data_as<T>(), dr_THR.data_as<T>(),
                     dtable_RE.defined() ? dtable_RE.data_as<T>() : nullptr);
  });
}

}  // namespace quill::ops
