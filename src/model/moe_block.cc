#include "model/moe_block.h"

#include <fmt/format.h>

#include <algorithm>

#include "base/error.h"
#include "model/layer_util.h"
#include "ops/columns.h"
#include "ops/elementwise.h"
#include "ops/linear.h"
#include "ops/moe.h"
#include "ops/router.h"
#include "ops/swiglu.h"

namespace quill {

MoeBlock::MoeBlock(const InklingConfig& c, int64_t layer, ParamTable& params, const TensorParallel& tp,
                   const ExpertParallel& ep, const RecomputeOptions& recompute)
    : layer_(layer), E_(c.n_routed_experts), S_(c.n_shared_experts), k_(c.num_experts_per_tok), F_(c.moe_intermediate_size),
      Fs_(c.moe_intermediate_size), tp_(tp), ep_(ep), recompute_act_(recompute.selective() && recompute.moe_act),
      recompute_inputs_(recompute.selective() && recompute.layernorm) {
  router_.n_routed = E_;
  router_.n_shared = S_;
  router_.top_k = k_;
  router_.route_scale = c.route_scale;
  const std::string p = fmt::format("model.llm.layers.{}.mlp.", layer);
  gate_ = &params.at(p + "gate.weight");
  bias_ = &params.at(p + "gate.bias");
  scale_ = &params.at(p + "gate.global_scale");
  w13_ = &params.at(p + "experts.w13_weight");
  w2_ = &params.at(p + "experts.w2_weight");
  sw13_ = &params.at(p + "shared_experts.shared_w13_weight");
  sw2_ = &params.at(p + "shared_experts.shared_w2_weight");
  Fs_ = sw2_->shape[2];  // this rank's columns of the shared experts
  QUILL_CHECK(w13_->shape[0] * ep_.size == E_,
              "{}: this rank holds {} of the {} routed experts, but --expert-model-parallel-size is {}", w13_->name,
              w13_->shape[0], E_, ep_.size);
}


Tensor MoeBlock::forward(const DeviceContext& ctx, const Tensor& x_region, Saved& s, const Tensor& replay_topk_Tk) const {
  // --tp-comm-overlap: the shared experts' input is gathered beside the router and the permutation.
  PendingTp xs;
  if (S_ > 0 && tp_.comm_overlap) xs = tp_.start_gather_input(ctx, x_region);
  const Tensor x_TD = tp_.chunk_of_region(x_region);
  const int64_t T = x_TD.dim(0), D = x_TD.dim(1), P = T * k_;
  s.x_TD = x_TD;
  // The router in fp32 from the activation itself (docs/decisions/router-gemm-bf16x3.md).
  s.logits_TX = new_tensor(ctx, {T, E_ + S_}, DType::F32);
  ops::router_gate_forward(ctx, x_TD, gate_->compute, s.logits_TX);
  s.topk_Tk = new_tensor(ctx, {T, k_}, DType::I32);
  s.weights_TW = new_tensor(ctx, {T, k_ + S_}, DType::F32);
  if (replay_topk_Tk.defined()) {
    ops::copy(ctx, replay_topk_Tk, s.topk_Tk);
    ops::router_forward_replay(ctx, s.logits_TX, scale_->compute, router_, s.topk_Tk, s.weights_TW);
  } else {
    ops::router_forward(ctx, s.logits_TX, bias_->compute, scale_->compute, router_, s.topk_Tk, s.weights_TW);
  }

  // Routed experts: permute into expert order, two grouped GEMMs around SwiGLU, weighted unpermute.
  s.wr_Tk = new_tensor(ctx, {T, k_}, DType::F32);
  ops::get_columns(ctx, s.weights_TW, 0, s.wr_Tk);
  s.slot_rows_Tk = new_tensor(ctx, {T, k_}, DType::I32);
  s.counts_E = Tensor::empty({E_}, DType::I64);  // host: the grouped GEMMs need the group sizes
  // Under expert parallelism the plan's counts stay where they are (on a GPU its device) for the counts' exchange,
  // and one copy brings them to the host with the peers' (plan_dispatch_deferred): one synchronisation, after the
  // permutation is enqueued. CPU ranks take the same path, so the layout tests check it against one rank. Without
  // the exchange the plan copies its counts to the host itself.
  const bool deferred_plan = ep_.active();
  Tensor plan_2E1;
  if (deferred_plan) {
    plan_2E1 = new_tensor(ctx, {2 * E_ + 1}, DType::I64);
    ops::moe_route_plan(ctx, s.topk_Tk, E_, s.slot_rows_Tk, plan_2E1.rows(0, E_ + 1));
  } else {
    ops::moe_route_plan(ctx, s.topk_Tk, E_, s.slot_rows_Tk, s.counts_E);
  }
  PendingTp shared_y;  // the shared experts' output (its reduction in flight), when computed during the exchange
  {  // To the ranks holding the experts (one rank: the rows stay, the counts are the group sizes).
    Tensor xp_PD = new_activation(ctx, {P, D});
    ops::moe_permute(ctx, x_TD, s.slot_rows_Tk, xp_PD);
    if (ep_.active()) {
      if (deferred_plan) {
        int64_t check_word = 0;
        s.dispatch = plan_dispatch_deferred(ctx, plan_2E1, ep_.comm, s.counts_E, &check_word);
        ops::moe_route_plan_check(ctx, s.topk_Tk, E_, check_word);
      } else {
        const int64_t* counts = s.counts_E.data_as<int64_t>();
        s.dispatch = plan_dispatch(ctx, std::vector<int64_t>(counts, counts + E_), ep_.comm);
      }
      s.local_counts_L = Tensor::empty({s.dispatch.local_experts}, DType::I64);
      std::copy(s.dispatch.local_counts.begin(), s.dispatch.local_counts.end(), s.local_counts_L.data_as<int64_t>());
      PendingDispatch pending = start_dispatch_tokens(ctx, s.dispatch, xp_PD, ep_.comm);
      ep_.yield_turn();
      if (overlap_shared()) shared_forward_up(ctx, x_region, xs, s);
      s.xr_RD = finish_dispatch_tokens(ctx, s.dispatch, pending);
    } else {
      s.local_counts_L = s.counts_E;
      s.xr_RD = xp_PD;
    }
  }
  const int64_t R = s.xr_RD.dim(0);
  s.hr_R2F = new_activation(ctx, {R, 2 * F_});
  s.ar_RF = new_activation(ctx, {R, F_});
  {  // The local experts' outputs, then back to the rows' own ranks.
    Tensor yr_RD = new_activation(ctx, {R, D});
    if (R > 0) {  // a rank may receive no rows at all
      param_grouped_forward(ctx, s.xr_RD, *w13_, s.local_counts_L, s.hr_R2F);
      ops::swiglu_forward(ctx, s.hr_R2F, s.ar_RF);
      param_grouped_forward(ctx, s.ar_RF, *w2_, s.local_counts_L, yr_RD);
    }
    if (recompute_act_) s.ar_RF = Tensor();  // made again from hr_R2F in the backward
    if (ep_.active() && (ep_.interleave || overlap_shared())) {
      // Beside the combine: the other pass of a combined step, and the shared experts' down projections.
      PendingDispatch back = start_combine_tokens(ctx, s.dispatch, yr_RD, ep_.comm);
      ep_.yield_turn();
      if (overlap_shared()) shared_y = shared_forward_down(ctx, s);
      s.yp_PD = finish_combine_tokens(ctx, s.dispatch, back);
    } else {
      s.yp_PD = ep_.active() ? combine_tokens(ctx, s.dispatch, yr_RD, ep_.comm) : yr_RD;
    }
  }
  Tensor y_TD = new_activation(ctx, {T, D});
  ops::moe_unpermute(ctx, s.yp_PD, s.slot_rows_Tk, s.wr_Tk, y_TD);
  Tensor y_region = tp_.region_of_chunk(ctx, y_TD);
  if (S_ == 0) {
    if (recompute_inputs_) s.x_TD = Tensor();
    return y_region;
  }
  if (!shared_y.out.defined()) shared_y = shared_forward(ctx, x_region, xs, s);
  ops::add_inplace(ctx, y_region, TensorParallel::finish(shared_y));
  if (recompute_inputs_) s.x_TD = s.xs_TD = Tensor();
  return y_region;
}

void MoeBlock::restore_inputs(const DeviceContext& ctx, const Tensor& x_region, Saved& s) const {
  s.x_region = x_region;
  s.x_TD = tp_.chunk_of_region(x_region);
  if (S_ > 0 && !tp_.comm_overlap) s.xs_TD = tp_.gather_input(ctx, x_region);  // else started by the backward
}

PendingTp MoeBlock::shared_forward(const DeviceContext& ctx, const Tensor& x_region, PendingTp& xs, Saved& s) const {
  shared_forward_up(ctx, x_region, xs, s);
  return shared_forward_down(ctx, s);
}

void MoeBlock::shared_forward_up(const DeviceContext& ctx, const Tensor& x_region, PendingTp& xs, Saved& s) const {
  const int64_t T = s.x_TD.dim(0);
  // Shared experts over all positions, each weighted per token by its router gamma before the down
  // projection; their partial sums (this rank's columns) are reduced into the sequence region.
  s.xs_TD = tp_.comm_overlap ? TensorParallel::finish(xs) : tp_.gather_input(ctx, x_region);
  const int64_t Ta = s.xs_TD.dim(0);
  Tensor gamma_TS = new_tensor(ctx, {T, S_}, DType::F32);
  ops::get_columns(ctx, s.weights_TW, k_, gamma_TS);
  const Tensor gamma_all = tp_.gather_chunks(ctx, gamma_TS);
  for (int64_t e = 0; e < S_; ++e) {
    Tensor h = new_activation(ctx, {Ta, 2 * Fs_}), a = new_activation(ctx, {Ta, Fs_});
    Tensor g = new_tensor(ctx, {Ta, 1}, DType::F32), asc = new_activation(ctx, {Ta, Fs_});
    param_forward(ctx, s.xs_TD, *sw13_, h, e);
    ops::swiglu_forward(ctx, h, a);
    ops::get_columns(ctx, gamma_all, e, g);
    ops::scale_rows(ctx, a, g.reshape({Ta}), asc);
    s.hs_T2F.push_back(h);
    if (!recompute_act_) s.as_TF.push_back(a);  // else made again in the backward (with asc)
    s.gamma_T1.push_back(g);
    s.asc_TF.push_back(asc);
  }
}

PendingTp MoeBlock::shared_forward_down(const DeviceContext& ctx, Saved& s) const {
  const int64_t Ta = s.xs_TD.dim(0), D = s.x_TD.dim(1);
  Tensor ys_TD = new_activation(ctx, {Ta, D}), ye_TD = S_ > 1 ? new_activation(ctx, {Ta, D}) : Tensor();
  for (int64_t e = 0; e < S_; ++e) {  // summed in expert order, as one loop over the experts would
    param_forward(ctx, s.asc_TF[static_cast<size_t>(e)], *sw2_, e == 0 ? ys_TD : ye_TD, e);
    if (e > 0) ops::add_inplace(ctx, ys_TD, ye_TD);
  }
  if (recompute_act_) s.asc_TF.clear();
  // --tp-comm-overlap: the reduction runs beside whatever the block computes before it adds the result.
  if (tp_.comm_overlap) return tp_.start_reduce_output(ctx, ys_TD);
  PendingTp y;
  y.out = tp_.reduce_output(ctx, ys_TD);
  return y;
}

Tensor MoeBlock::backward(const DeviceContext& ctx, const Saved& s, const Tensor& dy_region, ExpertWgradTurn turn) const {
  if (turn != ExpertWgradTurn::WriteWithHeld) held_rows_.expect_none(layer_);
  // --tp-comm-overlap: the shared experts' output gradient is gathered beside the routed path's start.
  PendingTp dys, xs_again;
  if (S_ > 0 && tp_.comm_overlap) dys = tp_.start_reduce_output_backward(ctx, dy_region);
  // Selective layernorm recompute: the shared experts' input gathered again, beside the routed path.
  if (S_ > 0 && tp_.comm_overlap && recompute_inputs_) xs_again = tp_.start_gather_input(ctx, s.x_region);
  const Tensor dy_TD = tp_.region_of_chunk_backward(dy_region);
  const int64_t T = dy_TD.dim(0), D = dy_TD.dim(1), P = T * k_;
  Tensor dx_TD = new_activation(ctx, {T, D});
  Tensor dweights_TW = new_tensor(ctx, {T, k_ + S_}, DType::F32);

  // Routed path, in reverse.
  Tensor dyp_PD = new_activation(ctx, {P, D}), dwr_Tk = new_tensor(ctx, {T, k_}, DType::F32);
  ops::moe_unpermute_backward(ctx, dy_TD, s.yp_PD, s.slot_rows_Tk, s.wr_Tk, dyp_PD, dwr_Tk);
  ops::set_columns(ctx, dweights_TW, 0, dwr_Tk);
  // Back to the experts' ranks (combine's adjoint), the GEMMs' backward, and home (dispatch's
  // adjoint). Without rows the experts' gradients get no write (settle_grads zeroes unwritten ones).
  PendingTp dxs;  // the shared experts' input gradient (its reduction in flight), when computed during the exchange
  Tensor dyr_RD = dyp_PD;
  if (ep_.active()) {
    PendingDispatch pending = start_dispatch_tokens(ctx, s.dispatch, dyp_PD, ep_.comm);
    ep_.yield_turn();
    if (overlap_shared()) dxs = shared_backward(ctx, s, dy_region, dys, xs_again, dweights_TW);
    dyr_RD = finish_dispatch_tokens(ctx, s.dispatch, pending);
  }
  const int64_t R = dyr_RD.dim(0);
  // --delay-wgrad-compute (under expert parallelism): the input gradients first, then the return exchange
  // started and the two weight gradients beside it (they read nothing it writes).
  const bool delay = ep_.active() && ep_.delay_wgrad;
  // The return exchange is started and then waited for when something runs beside it: the delayed weight
  // gradients, or the other pass of a combined step.
  const bool started_return = ep_.active() && (ep_.delay_wgrad || ep_.interleave);
  // A micro-batch that holds its rows or writes them with the held ones (--moe-expert-wgrad-micro-batches 2) does
  // its weight gradients after the input gradients, as --delay-wgrad-compute does (beside the exchange with it).
  const bool late_wgrad = delay || turn != ExpertWgradTurn::Write;
  // --recompute-modules moe_act: the SwiGLU output again, from the gate/up output kept.
  Tensor ar_RF = s.ar_RF;
  if (recompute_act_) {
    ar_RF = new_activation(ctx, {R, F_});
    if (R > 0) ops::swiglu_forward(ctx, s.hr_R2F, ar_RF);
  }
  Tensor dar_RF = new_activation(ctx, {R, F_});
  if (R > 0) {
    if (!late_wgrad) write_grouped_weight_grad(ctx, dyr_RD, ar_RF, s.local_counts_L, *w2_);
    param_grouped_backward_input(ctx, dyr_RD, *w2_, s.local_counts_L, dar_RF);
  }
  Tensor dhr_R2F = new_activation(ctx, {R, 2 * F_});
  if (R > 0) {
    ops::swiglu_backward(ctx, s.hr_R2F, dar_RF, dhr_R2F);
    if (!late_wgrad) write_grouped_weight_grad(ctx, dhr_R2F, s.xr_RD, s.local_counts_L, *w13_);
  }
  Tensor dxr_RD = new_activation(ctx, {R, D});
  if (R > 0) param_grouped_backward_input(ctx, dhr_R2F, *w13_, s.local_counts_L, dxr_RD);
  // The routed weight gradients after the input gradients: this micro-batch's rows alone, held for the next, or
  // summed with the held ones in one GEMM per matrix (model/expert_wgrad_pairs.h).
  auto late_weight_grads = [&] {
    const ExpertRows own{dyr_RD, ar_RF, dhr_R2F, s.xr_RD, s.local_counts_L};
    if (turn == ExpertWgradTurn::Hold) return held_rows_.hold(own);
    if (turn == ExpertWgradTurn::WriteWithHeld) return held_rows_.write_with(ctx, own, *w2_, *w13_);
    write_expert_weight_grads(ctx, own, *w2_, *w13_);
  };
  Tensor dxp_PD = dxr_RD;
  if (started_return) {
    PendingDispatch back = start_combine_tokens(ctx, s.dispatch, dxr_RD, ep_.comm);
    ep_.yield_turn();
    if (late_wgrad) late_weight_grads();
    dxp_PD = finish_combine_tokens(ctx, s.dispatch, back);
  } else {
    if (late_wgrad) late_weight_grads();
    if (ep_.active()) dxp_PD = combine_tokens(ctx, s.dispatch, dxr_RD, ep_.comm);
  }
  ops::moe_permute_backward(ctx, dxp_PD, s.slot_rows_Tk, dx_TD);

  if (S_ > 0 && !dxs.out.defined()) dxs = shared_backward(ctx, s, dy_region, dys, xs_again, dweights_TW);

  // Router.
  Tensor dlogits_TX = new_tensor(ctx, {T, E_ + S_}, DType::F32);
  ops::router_backward(ctx, s.logits_TX, s.topk_Tk, s.weights_TW, scale_->compute, router_, dweights_TW, dlogits_TX,
                       grad_target(ctx, *scale_));
  const GradWrite gate_grad = grad_write(ctx, *gate_);
  ops::router_gate_backward_weight(ctx, dlogits_TX, s.x_TD, gate_grad.grad, gate_grad.accumulate);
  Tensor dxr_TD = new_activation(ctx, {T, D});
  ops::router_gate_backward_input(ctx, dlogits_TX, gate_->compute, dxr_TD);
  ops::add_inplace(ctx, dx_TD, dxr_TD);
  Tensor dx_region = tp_.chunk_of_region_backward(ctx, dx_TD);
  if (dxs.out.defined()) ops::add_inplace(ctx, dx_region, TensorParallel::finish(dxs));
  return dx_region;
}

// Shared experts, over all positions; their input gradient (partial over the ranks' columns) and the
// gammas' gradients return to the sequence region and to the rank's chunk. Under --tp-comm-overlap every
// shared expert's input gradient comes first, keeping its dh, and the weight gradients (which nothing later
// reads) run beside the input gradient's reduce-scatter; the gammas' small reduce-scatter is a blocking call
// before it (after a started one on the same stream it would wait for it).
PendingTp MoeBlock::shared_backward(const DeviceContext& ctx, const Saved& s, const Tensor& dy_region, PendingTp& dys,
                                    PendingTp& xs_again, Tensor& dweights_TW) const {
  const int64_t D = s.x_TD.dim(1);
  const bool overlap = tp_.comm_overlap;
  const Tensor dys_TD = overlap ? TensorParallel::finish(dys) : tp_.reduce_output_backward(ctx, dy_region);
  const int64_t Ta = dys_TD.dim(0);
  Tensor dxs_TD = new_activation(ctx, {Ta, D}), dgamma_TS = new_tensor(ctx, {Ta, S_}, DType::F32);
  // Each shared expert's slice of sw13 / sw2 is written once: all slices take the parameter's flag.
  const GradWrite sw13_grad = grad_write(ctx, *sw13_), sw2_grad = grad_write(ctx, *sw2_);
  std::vector<Tensor> dh_T2F, asc_TF;  // under the overlap, for the weight gradients after the loop
  for (int64_t e = 0; e < S_; ++e) {
    const size_t i = static_cast<size_t>(e);
    Tensor dasc = new_activation(ctx, {Ta, Fs_}), da = new_activation(ctx, {Ta, Fs_});
    Tensor dg = new_tensor(ctx, {Ta, 1}, DType::F32), dh = new_activation(ctx, {Ta, 2 * Fs_});
    Tensor a = recompute_act_ ? Tensor() : s.as_TF[i], asc = recompute_act_ ? Tensor() : s.asc_TF[i];
    if (recompute_act_) {  // --recompute-modules moe_act: SwiGLU and the gamma scaling again, as the forward ran them
      a = new_activation(ctx, {Ta, Fs_});
      asc = new_activation(ctx, {Ta, Fs_});
      ops::swiglu_forward(ctx, s.hs_T2F[i], a);
      ops::scale_rows(ctx, a, s.gamma_T1[i].reshape({Ta}), asc);
    }
    if (!overlap)
      param_backward_weight(ctx, dys_TD, asc, *sw2_, expert_matrix(sw2_grad.grad, e), sw2_grad.accumulate);
    param_backward_input(ctx, dys_TD, *sw2_, dasc, false, e);
    ops::scale_rows_backward(ctx, a, s.gamma_T1[i].reshape({Ta}), dasc, da, dg.reshape({Ta}));
    ops::set_columns(ctx, dgamma_TS, e, dg);
    ops::swiglu_backward(ctx, s.hs_T2F[e], da, dh);
    if (!overlap)
      param_backward_weight(ctx, dh, s.xs_TD, *sw13_, expert_matrix(sw13_grad.grad, e), sw13_grad.accumulate);
    param_backward_input(ctx, dh, *sw13_, dxs_TD, /*accumulate=*/e > 0, e);
    if (overlap) {
      dh_T2F.push_back(dh);
      asc_TF.push_back(asc);
    }
  }
  ops::set_columns(ctx, dweights_TW, k_, tp_.reduce_scatter_chunks(ctx, dgamma_TS));
  PendingTp dxs;
  if (!overlap) {
    dxs.out = tp_.gather_input_backward(ctx, dxs_TD);
    return dxs;
  }
  dxs = tp_.start_gather_input_backward(ctx, dxs_TD);
  const Tensor xs_TD = xs_again.out.defined() ? TensorParallel::finish(xs_again) : s.xs_TD;
  for (int64_t e = 0; e < S_; ++e) {
    param_backward_weight(ctx, dys_TD, asc_TF[static_cast<size_t>(e)], *sw2_, expert_matrix(sw2_grad.grad, e),
                          sw2_grad.accumulate);
    param_backward_weight(ctx, dh_T2F[static_cast<size_t>(e)], xs_TD, *sw13_, expert_matrix(sw13_grad.grad, e),
                          sw13_grad.accumulate);
  }
  return dxs;
}

}  // namespace quill
