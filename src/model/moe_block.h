// The MoE sub-layer (transformers' InklingMoE): router, top-k routed experts and the router-weighted
// shared experts ("shared-expert sink").
//   logits = Wg x;  (topk, w, gammas) = router(logits)
//   y = sum_{j<k} w_j * E_{topk_j}(x) + sum_s W2_s (swiglu(W13_s x) * gamma_s)
// Routed tokens are permuted into expert-sorted order and run through grouped GEMMs, as the CUDA
// backend does. The router runs in fp32 (its input is converted).
//
// Under tensor parallelism (expert tensor parallelism 1, parallel/tensor_parallel.h) the router and
// the routed experts work on the rank's own chunk of positions (every rank holds whole experts); the
// shared experts are split like the dense MLP (column-parallel W13, row-parallel W2) over all T
// positions, with the router's gammas gathered to them and their gradients reduce-scattered back.
// Under expert parallelism (parallel/expert_dispatch.h) each rank holds E/ep of the routed experts:
// after routing and the permutation into expert order (all E experts) the rows go to the ranks that
// hold their experts (plan_dispatch, dispatch_tokens), run through the grouped GEMMs of the rank's
// local experts, and come back (combine_tokens) before the weighted un-permutation. The backward
// runs the same exchange in reverse: dispatch's adjoint is combine and combine's is dispatch.
// Dropless: every row reaches its expert, however uneven the routing.
// Legend: T tokens (Tc: the rank's chunk), D hidden, F expert width (Fs: the shared experts' share),
// E routed (El = E/ep local), S shared, k top-k, P = Tc*k, R rows received for the local experts.
#pragma once

#include <vector>

#include "model/config.h"
#include "model/expert_wgrad_pairs.h"
#include "model/params.h"
#include "model/recompute.h"
#include "ops/device_context.h"
#include "ops/router.h"
#include "parallel/expert_dispatch.h"
#include "parallel/tensor_parallel.h"

namespace quill {

class MoeBlock {
 public:
  // recompute: --recompute-modules moe_act (the SwiGLU outputs made again in the backward) and layernorm (the
  // block's input and its gathered copy dropped after the forward: restore_inputs).
  MoeBlock(const InklingConfig& config, int64_t layer, ParamTable& params, const TensorParallel& tp = {},
           const ExpertParallel& ep = {}, const RecomputeOptions& recompute = {});

  struct Saved {
    // The rank's chunk: its input, the router's values, its routed rows' combined outputs (yp_PD).
    // counts_E: the rank's own rows per expert, all E (what metrics report, summed over ranks).
    Tensor x_TD, logits_TX, topk_Tk, weights_TW, wr_Tk, slot_rows_Tk, counts_E, yp_PD;
    // The local experts' rows (from every rank of the expert-parallel group; with one rank the
    // rank's own rows), their group sizes (host I64 [El]) and the exchange's plan.
    Tensor xr_RD, hr_R2F, ar_RF, local_counts_L;
    DispatchPlan dispatch;
    Tensor xs_TD;  // all T positions (the shared experts' input)
    // --recompute-modules layernorm: the block's input made again (restore_inputs); under --tp-comm-overlap the
    // backward gathers xs_TD from it, started at its top and waited for at the shared experts' weight gradients.
    Tensor x_region;
    std::vector<Tensor> hs_T2F, as_TF, gamma_T1, asc_TF;  // per shared expert, all T positions
  };
  // replay_topk_Tk, when defined, fixes the expert choice (routing replay); the forward's own
  // choice is in saved.topk_Tk either way.
  Tensor forward(const DeviceContext& ctx, const Tensor& x_TD, Saved& saved, const Tensor& replay_topk_Tk = {}) const;
  // `turn`: what this micro-batch does with the routed experts' weight gradients (model/expert_wgrad_pairs.h;
  // --moe-expert-wgrad-micro-batches 2 holds one micro-batch's rows for the next).
  Tensor backward(const DeviceContext& ctx, const Saved& saved, const Tensor& dy_TD,
                  ExpertWgradTurn turn = ExpertWgradTurn::Write) const;
  // --recompute-modules layernorm: the inputs the forward dropped, made again from its input `x_region` (the
  // norm's output, recomputed by the layer): the chunk, its fp32 copy and (shared experts) all T rows.
  void restore_inputs(const DeviceContext& ctx, const Tensor& x_region, Saved& saved) const;

 private:
  // The shared experts over all positions, reduced into the sequence region (their contribution to
  // the output); and their backward: the input gradient in the region, the gammas' gradients into
  // dweights_TW's shared columns.
  // Under --tp-comm-overlap (tp_.comm_overlap) their input or output gradient arrives started (xs, dys:
  // finished here) and their result leaves started (finished where the block adds it).
  // shared_forward = shared_forward_up (each shared expert's gate/up projection, SwiGLU and gamma scaling) then
  // shared_forward_down (their down projections, summed in expert order, and the reduction started): under
  // --moe-shared-expert-overlap the first runs beside the token dispatch and the second beside the combine, as
  // Megatron-Core splits them (fc1 beside the dispatch, fc2 beside the combine).
  PendingTp shared_forward(const DeviceContext& ctx, const Tensor& x_region, PendingTp& xs, Saved& s) const;
  void shared_forward_up(const DeviceContext& ctx, const Tensor& x_region, PendingTp& xs, Saved& s) const;
  PendingTp shared_forward_down(const DeviceContext& ctx, Saved& s) const;
  // xs_again: the shared experts' input, gathered again in flight (selective layernorm recompute), else empty.
  PendingTp shared_backward(const DeviceContext& ctx, const Saved& s, const Tensor& dy_region, PendingTp& dys,
                            PendingTp& xs_again, Tensor& dweights_TW) const;
  // With --moe-shared-expert-overlap under expert parallelism: the shared experts run while the
  // routed rows' exchanges are in flight (forward: up beside the dispatch, down beside the combine; backward:
  // beside the output gradients' exchange).
  bool overlap_shared() const { return ep_.active() && ep_.overlap_shared_experts && S_ > 0; }

  int64_t layer_, E_, S_, k_, F_, Fs_;
  TensorParallel tp_;
  ExpertParallel ep_;
  bool recompute_act_, recompute_inputs_;
  ops::RouterParams router_;
  Param *gate_, *bias_, *scale_, *w13_, *w2_, *sw13_, *sw2_;
  // The routed rows a micro-batch holds for the next one's weight gradients (ExpertWgradTurn::Hold). Mutable as
  // Param::grad_unset is: gradient-accumulation state that the const backward records.
  mutable HeldExpertRows held_rows_;
};

}  // namespace quill
