// Inkling MoE router (transformers' InklingTopkRouter), after the gate linear.
// logits_NX [N, E + S]: E routed then S shared logits. bias_E [E]: the selection bias, used only to
// choose experts (never trained). global_scale [1].
//   choice: the top_k routed experts by sigmoid(logit) + bias, computed in fp32 (double on the F64
//           path), ties broken by the lower expert index; topk_idx_Nk [N, k] I32 lists them by
//           descending choice score.
//   weights: u = logsigmoid of the k chosen routed logits and the S shared logits;
//            w = softmax(u) * route_scale * global_scale   (so the k + S weights sum to route_scale*gs)
//   weights_NW [N, k + S]: the k routed weights (in topk_idx order) then the S shared gammas.
// Backward: dlogits overwritten (zero for unchosen routed experts), dglobal_scale accumulated.
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

}  // namespace quill::ops
