// Inkling MoE router (transformers' InklingTopkRouter), after the gate linear.
// logits_NX [N, E + S]: E routed then S shared logits. bias_E [E]: the selection bias, used only to
// choose experts (never trained). global_scale [1].
//   choice: the top_k routed experts by sigmoid(logit) + bias, computed in fp32 (double on the F64
//           path), ties broken by the lower expert index; topk_idx_Nk [N, k] I32 lists them by
//           descending choice score.
//   weights: u = logsigmoid of the k chosen routed logits and the S shared logits;
//            w = softmax(u) * route_scale * global_scale   (so the k + S weights sum to route_scale*gs)
//   weights_NW [N, k + S]: the k routed weights (in topk_idx order) then the S shared gammas.
// Backward: dlogits overwritten (zero for unchosen routed experts), dglobal_scale accumulated. Its topk_idx_Nk is
// the forward's, checked there (router_forward makes it, router_forward_replay names a bad element): on the GPU the
// backward does not synchronise to check it again; a row naming an expert outside [0, E) is skipped, its dlogits row
// untouched and nothing added for it (as the MoE row ops skip a row outside their range). The CPU still names it.
#pragma once

#include "ops/device_context.h"

namespace quill::ops {

struct RouterParams {
  int64_t n_routed = 0;
  int64_t n_shared = 0;
  int64_t top_k = 0;
  double route_scale = 1.0;
};

void router_forward(const DeviceContext& ctx, const Tensor& logits_NX, const Tensor& bias_E, const Tensor& global_scale,
                    const RouterParams& params, const Tensor& topk_idx_Nk, const Tensor& weights_NW);
// Routing replay (miles' R3): the choice topk_idx_Nk is an input, recorded by an earlier forward;
// only the weights are computed. Same backward.
void router_forward_replay(const DeviceContext& ctx, const Tensor& logits_NX, const Tensor& global_scale,
                           const RouterParams& params, const Tensor& topk_idx_Nk, const Tensor& weights_NW);
void router_backward(const DeviceContext& ctx, const Tensor& logits_NX, const Tensor& topk_idx_Nk,
                     const Tensor& weights_NW, const Tensor& global_scale, const RouterParams& params,
                     const Tensor& dweights_NW, const Tensor& dlogits_NX, const Tensor& dglobal_scale);

// The gate before the router: logits = x w^T with the gate's fp32 weight (double on the F64 path), in the
// weight's arithmetic whatever the activation's dtype (docs/decisions/router-gemm-bf16x3.md).
// x_TD [T, D] an activation (F32, or BF16 widened exactly), w_XD [X, D], logits_TX [T, X] in w's dtype.
// Backward: dx_TD [T, D] = dlogits w, overwritten, rounded once to dx's dtype (an activation's); dw_XD [X, D]
// += dlogits^T x, or overwritten when !accumulate. The GPU runs a bf16 x's products as exact bf16 parts on the
// tensor cores (src/ops/cuda/router_gate.cu); the CPU computes them as the linear ops of ops/linear.h.
void router_gate_forward(const DeviceContext& ctx, const Tensor& x_TD, const Tensor& w_XD, const Tensor& logits_TX);
void router_gate_backward_input(const DeviceContext& ctx, const Tensor& dlogits_TX, const Tensor& w_XD,
                                const Tensor& dx_TD);
void router_gate_backward_weight(const DeviceContext& ctx, const Tensor& dlogits_TX, const Tensor& x_TD,
                                 const Tensor& dw_XD, bool accumulate);

}  // namespace quill::ops
