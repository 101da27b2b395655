// The CUDA backend's op implementations: the same signatures as the public ops (src/ops/*.h),
// in namespace quill::cuda. Dtypes follow docs/decisions/cuda-precision.md. op_table.cc collects
// them into the OpTable that a CUDA DeviceContext carries.
#pragma once

#include "ops/adamw.h"
#include "ops/attention.h"
#include "ops/columns.h"
#include "ops/convert.h"
#include "ops/cross_entropy.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/fp8.h"
#include "ops/linear.h"
#include "ops/moe.h"
#include "ops/rmsnorm.h"
#include "ops/router.h"
#include "ops/short_conv.h"
#include "ops/swiglu.h"

namespace quill::cuda {

using ops::AdamWStep;
using ops::AttentionParams;
using ops::RouterParams;

// ops/adamw.h
void adamw_update(const DeviceContext& ctx, const Tensor& value, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq, const Tensor& compute, const AdamWStep& step);
// ops/attention.h
void attention_forward(const DeviceContext& ctx, const Tensor& q_THd, const Tensor& k_TGd, const Tensor& v_TGd, const Tensor& r_THR, const Tensor& table_RE, const AttentionParams& params, const Tensor& out_THd, const Tensor& lse_HT);
void attention_backward(const DeviceContext& ctx, const Tensor& q_THd, const Tensor& k_TGd, const Tensor& v_TGd, const Tensor& r_THR, const Tensor& table_RE, const AttentionParams& params, const Tensor& out_THd, const Tensor& lse_HT, const Tensor& dout_THd, const Tensor& dq_THd, const Tensor& dk_TGd, const Tensor& dv_TGd, const Tensor& dr_THR, const Tensor& dtable_RE);
// ops/columns.h
void get_columns(const DeviceContext& ctx, const Tensor& x_NW, int64_t col, const Tensor& out_Nw);
void set_columns(const DeviceContext& ctx, const Tensor& x_NW, int64_t col, const Tensor& v_Nw);
// ops/convert.h
void convert(const DeviceContext& ctx, const Tensor& src, const Tensor& dst);
void zero(const DeviceContext& ctx, const Tensor& t);
void transfer(const DeviceContext& ctx, const Tensor& src, const Tensor& dst);
void transfer_async(const DeviceContext& ctx, const Tensor& src, const Tensor& dst);
void wait_transfers(const DeviceContext& ctx, bool host);
ops::TransferFence transfer_fence(const DeviceContext& ctx);
void wait_transfer_fence(const DeviceContext& ctx, const ops::TransferFence& fence);
void bind_host_thread(const DeviceContext& ctx);
// ops/cross_entropy.h
double cross_entropy_forward_backward(const DeviceContext& ctx, const Tensor& logits_TV, const Tensor& targets_T, const Tensor& weights_T, int64_t vocab_limit, double grad_scale, const Tensor& dlogits_TV);
void cross_entropy_shard_stats(const DeviceContext& ctx, const Tensor& logits_TV, const Tensor& targets_T, const Tensor& weights_T, int64_t vocab_begin, int64_t vocab_limit, const Tensor& stats_T3);
double cross_entropy_shard_backward(const DeviceContext& ctx, const Tensor& logits_TV, const Tensor& targets_T, const Tensor& weights_T, int64_t vocab_begin, int64_t vocab_limit, const Tensor& all_stats_RT3, double grad_scale, const Tensor& dlogits_TV);
// ops/elementwise.h
void copy(const DeviceContext& ctx, const Tensor& src, const Tensor& dst);
void add_inplace(const DeviceContext& ctx, const Tensor& y, const Tensor& x);
void scale_inplace(const DeviceContext& ctx, const Tensor& y, double s);
void scale_by_scalar(const DeviceContext& ctx, const Tensor& x, const Tensor& s_1, const Tensor& y);
void scale_by_scalar_backward(const DeviceContext& ctx, const Tensor& x, const Tensor& s_1, const Tensor& dy, const Tensor& dx, const Tensor& ds_1);
void scale_rows(const DeviceContext& ctx, const Tensor& x_ND, const Tensor& s_N, const Tensor& y_ND);
void scale_rows_backward(const DeviceContext& ctx, const Tensor& x_ND, const Tensor& s_N, const Tensor& dy_ND, const Tensor& dx_ND, const Tensor& ds_N);
double sum_squares(const DeviceContext& ctx, const Tensor& x);
// ops/embedding.h
void embedding_forward(const DeviceContext& ctx, const Tensor& table_VD, const Tensor& ids_T, const Tensor& out_TD);
void embedding_backward(const DeviceContext& ctx, const Tensor& ids_T, const Tensor& dout_TD, const Tensor& dtable_VD);
void embedding_forward_shard(const DeviceContext& ctx, const Tensor& table_VD, const Tensor& ids_T, int64_t vocab_begin, int64_t vocab_total, const Tensor& out_TD);
void embedding_backward_shard(const DeviceContext& ctx, const Tensor& ids_T, const Tensor& dout_TD, int64_t vocab_begin, int64_t vocab_total, const Tensor& dtable_VD);
// ops/linear.h
void linear_forward(const DeviceContext& ctx, const Tensor& x_NK, const Tensor& w_MK, const Tensor& y_NM);
void linear_backward_input(const DeviceContext& ctx, const Tensor& dy_NM, const Tensor& w_MK, const Tensor& dx_NK, bool accumulate);
void linear_backward_weight(const DeviceContext& ctx, const Tensor& dy_NM, const Tensor& x_NK, const Tensor& dw_MK, bool accumulate);
// For measurement only (bench/grouped): linear_backward_weight with the cuBLASLt heuristic's algorithm
// number `index` (0: the one quill uses) instead of the plan cache's; false when the heuristic offers
// fewer. `config` gets the algorithm's configuration (tile, stages, split-k, ...).
bool linear_backward_weight_candidate(const DeviceContext& ctx, const Tensor& dy_NM, const Tensor& x_NK,
                                      const Tensor& dw_MK, bool accumulate, int index, std::string* config);
// ops/fp8.h (fp8_gemm.cc)
void fp8_quantize(const DeviceContext& ctx, const Tensor& x, const ops::Fp8Tensor& out);
void fp8_dequantize(const DeviceContext& ctx, const ops::Fp8Tensor& q, const Tensor& counts_E, const Tensor& out,
                    bool from_transpose);
void fp8_linear_forward(const DeviceContext& ctx, const Tensor& x_NK, const ops::Fp8Tensor& w_MK, const Tensor& y_NM);
void fp8_linear_backward_input(const DeviceContext& ctx, const Tensor& dy_NM, const ops::Fp8Tensor& w_MK,
                               const Tensor& dx_NK, bool accumulate);
void fp8_linear_backward_weight(const DeviceContext& ctx, const Tensor& dy_NM, const Tensor& x_NK, const Tensor& dw_MK,
                                bool accumulate);
void fp8_grouped_linear_forward(const DeviceContext& ctx, const Tensor& x_PK, const ops::Fp8Tensor& w_EMK,
                                const Tensor& counts_E, const Tensor& y_PM);
void fp8_grouped_linear_backward_input(const DeviceContext& ctx, const Tensor& dy_PM, const ops::Fp8Tensor& w_EMK,
                                       const Tensor& counts_E, const Tensor& dx_PK);
void fp8_grouped_linear_backward_weight(const DeviceContext& ctx, const Tensor& dy_PM, const Tensor& x_PK,
                                        const Tensor& counts_E, const Tensor& dw_EMK, bool accumulate);
// ops/moe.h
void moe_route_plan(const DeviceContext& ctx, const Tensor& topk_idx_Nk, int64_t n_experts, const Tensor& slot_rows_Nk, const Tensor& counts_E);
void moe_permute(const DeviceContext& ctx, const Tensor& x_ND, const Tensor& slot_rows_Nk, const Tensor& xp_PD);
void moe_permute_backward(const DeviceContext& ctx, const Tensor& dxp_PD, const Tensor& slot_rows_Nk, const Tensor& dx_ND);
void moe_unpermute(const DeviceContext& ctx, const Tensor& yp_PD, const Tensor& slot_rows_Nk, const Tensor& weights_Nk, const Tensor& out_ND);
void moe_unpermute_backward(const DeviceContext& ctx, const Tensor& dout_ND, const Tensor& yp_PD, const Tensor& slot_rows_Nk, const Tensor& weights_Nk, const Tensor& dyp_PD, const Tensor& dweights_Nk);
void grouped_linear_forward(const DeviceContext& ctx, const Tensor& x_PK, const Tensor& w_EMK, const Tensor& counts_E, const Tensor& y_PM);
void grouped_linear_backward_input(const DeviceContext& ctx, const Tensor& dy_PM, const Tensor& w_EMK, const Tensor& counts_E, const Tensor& dx_PK);
void grouped_linear_backward_weight(const DeviceContext& ctx, const Tensor& dy_PM, const Tensor& x_PK, const Tensor& counts_E, const Tensor& dw_EMK, bool accumulate);
void grouped_linear_backward_weight_pair(const DeviceContext& ctx, const Tensor& dy_a_PM, const Tensor& x_a_PK,
                                         const Tensor& counts_a_E, const Tensor& dy_b_PM, const Tensor& x_b_PK,
                                         const Tensor& counts_b_E, const Tensor& dw_EMK, bool accumulate);
// ops/rmsnorm.h
void rmsnorm_forward(const DeviceContext& ctx, const Tensor& x_ND, const Tensor& w_D, double eps, const Tensor& y_ND, const Tensor& rstd_N);
void rmsnorm_backward(const DeviceContext& ctx, const Tensor& x_ND, const Tensor& w_D, const Tensor& rstd_N, const Tensor& dy_ND, const Tensor& dx_ND, const Tensor& dw_D);
// ops/router.h
void router_forward(const DeviceContext& ctx, const Tensor& logits_NX, const Tensor& bias_E, const Tensor& global_scale, const RouterParams& params, const Tensor& topk_idx_Nk, const Tensor& weights_NW);
void router_forward_replay(const DeviceContext& ctx, const Tensor& logits_NX, const Tensor& global_scale, const RouterParams& params, const Tensor& topk_idx_Nk, const Tensor& weights_NW);
void router_gate_forward(const DeviceContext& ctx, const Tensor& x_TD, const Tensor& w_XD, const Tensor& logits_TX);
void router_gate_backward_input(const DeviceContext& ctx, const Tensor& dlogits_TX, const Tensor& w_XD, const Tensor& dx_TD);
void router_gate_backward_weight(const DeviceContext& ctx, const Tensor& dlogits_TX, const Tensor& x_TD, const Tensor& dw_XD, bool accumulate);
void router_backward(const DeviceContext& ctx, const Tensor& logits_NX, const Tensor& topk_idx_Nk, const Tensor& weights_NW, const Tensor& global_scale, const RouterParams& params, const Tensor& dweights_NW, const Tensor& dlogits_NX, const Tensor& dglobal_scale);
// ops/short_conv.h
void short_conv_forward(const DeviceContext& ctx, const Tensor& x_TC, const Tensor& w_CK, const Tensor& y_TC,
                        const Tensor& halo_HC);
void short_conv_backward(const DeviceContext& ctx, const Tensor& x_TC, const Tensor& w_CK, const Tensor& dy_TC,
                         const Tensor& dx_TC, const Tensor& dw_CK, const Tensor& halo_HC, const Tensor& dhalo_HC);
// ops/swiglu.h
void swiglu_forward(const DeviceContext& ctx, const Tensor& h_N2F, const Tensor& a_NF);
void swiglu_backward(const DeviceContext& ctx, const Tensor& h_N2F, const Tensor& da_NF, const Tensor& dh_N2F);

}  // namespace quill::cuda
