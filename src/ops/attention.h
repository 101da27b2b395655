// Inkling attention core: GQA softmax attention with a hidden-state-conditioned relative bias, a
// causal (optionally sliding) mask and the global layers' long-context log scaling.
//
// Shapes (one row = one sequence, positions 0..T-1): q_THd [T, H, d], k_TGd [T, G, d], v_TGd [T, G, d]
// with H % G == 0 (query head h reads kv head h / (H/G)); r_THR [T, H, R] (the r projection's output);
// table_RE [R, E]; out_THd [T, H, d]; lse_HT [H, T] (log-sum-exp of each query's scores, saved for
// backward).
//
//   bias(t, s, h)  = sum_i r[t, h, i] * table[i, t - s]   if 0 <= t - s < E, else 0
//   tau(t)         = 1 + alpha * ln(max((t + 1) / n_floor, 1))  when log scaling is on, else 1
//   score(t, s, h) = tau(t) * (scale * q[t, h] . k[s, h/(H/G)] + bias(t, s, h))
//   allowed(t, s)  = s <= t and (window == 0 or t - s < window)
//   out[t, h]      = sum_s softmax_s(score over allowed s) * v[s, h/(H/G)]
//
// Backward: dq, dk, dv, dr overwritten; dtable accumulated, or not computed when dtable_RE is undefined (the
// table frozen, as Miles trains it: the GPU's dtable is a GEMM over every query's bias-row gradient, ~0.1 ms of a
// local layer's backward at a seed rank).
#pragma once

#include "ops/device_context.h"

namespace quill::ops {

struct AttentionParams {
  int64_t window = 0;     // 0: full causal; else the query plus window-1 previous keys
  double scale = 1.0;     // Inkling: 1 / head_dim
  bool log_scaling = false;
  double log_floor = 128000.0;
  double log_alpha = 0.1;
};

void attention_forward(const DeviceContext& ctx, const Tensor& q_THd, const Tensor& k_TGd, const Tensor& v_TGd,
                       const Tensor& r_THR, const Tensor& table_RE, const AttentionParams& params,
                       const Tensor& out_THd, const Tensor& lse_HT);
void attention_backward(const DeviceContext& ctx, const Tensor& q_THd, const Tensor& k_TGd, const Tensor& v_TGd,
                        const Tensor& r_THR, const Tensor& table_RE, const AttentionParams& params,
                        const Tensor& out_THd, const Tensor& lse_HT, const Tensor& dout_THd, const Tensor& dq_THd,
                        const Tensor& dk_TGd, const Tensor& dv_TGd, const Tensor& dr_THR, const Tensor& dtable_RE);

}  // namespace quill::ops
