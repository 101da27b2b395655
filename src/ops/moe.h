// Token permutation and grouped GEMMs for routed experts.
//
// moe_route_plan: from topk_idx_Nk [N, k] I32 sorts the N*k (token, slot) assignments by expert, stably
// by (expert, token, slot): slot_rows_Nk I32 [N, k] holds each assignment's row p in that order, and
// counts_E I64 [E] (host memory) the rows per expert; an expert outside [0, E) is an error naming
// [token, slot] (on a GPU after the op's one synchronisation). Or, with counts_E I64 [E + 1] in the context's
// memory, the check deferred: counts_E[0, E) the counts and counts_E[E] the check word, the smallest assignment
// (token * k + slot) naming an expert outside [0, E), or kRoutePlanAllInRange; with such an assignment the counts
// are zero and slot_rows unwritten. On a GPU that form does not synchronise: the expert exchange copies the counts
// to the host with the ones it receives, in one copy (parallel/expert_dispatch.h), and its caller hands the check
// word to moe_route_plan_check. The row ops take slot_rows as the plan wrote it (a
// permutation of [0, N*k): the CPU checks it; on a GPU, where a check would synchronise every call,
// only that each row is in range).
// moe_permute: xp_PD[p(t, slot)] = x_ND[t]. moe_permute_backward: dx_ND[t] = sum_slot dxp_PD[p(t, slot)]
// (overwritten).
// moe_unpermute: out_ND[t] = sum_slot weights_Nk[t, slot] * yp_PD[p(t, slot)] (overwrites out).
// moe_unpermute_backward: dyp_PD[p(t, slot)] = weights[t, slot] * dout[t]; dweights_Nk[t, slot] =
// dout[t] . yp[p(t, slot)] (overwritten).
// grouped_linear_*: for each expert e, rows [off_e, off_e + counts[e]) of x_PK times w_EMK[e]^T; the
// same rules as ops/linear.h (dw accumulated).
#pragma once

#include "ops/device_context.h"

namespace quill::ops {

void moe_route_plan(const DeviceContext& ctx, const Tensor& topk_idx_Nk, int64_t n_experts, const Tensor& slot_rows_Nk,
                    const Tensor& counts_E);
constexpr int64_t kRoutePlanAllInRange = 0xffffffffLL;  // the deferred form's check word: every expert in range
// Throws moe_route_plan's error for a check word naming a bad assignment (reading its expert from topk_idx_Nk).
void moe_route_plan_check(const DeviceContext& ctx, const Tensor& topk_idx_Nk, int64_t n_experts, int64_t check_word);
void moe_permute(const DeviceContext& ctx, const Tensor& x_ND, const Tensor& slot_rows_Nk, const Tensor& xp_PD);
void moe_permute_backward(const DeviceContext& ctx, const Tensor& dxp_PD, const Tensor& slot_rows_Nk,
                          const Tensor& dx_ND);
void moe_unpermute(const DeviceContext& ctx, const Tensor& yp_PD, const Tensor& slot_rows_Nk, const Tensor& weights_Nk,
                   const Tensor& out_ND);
void moe_unpermute_backward(const DeviceContext& ctx, const Tensor& dout_ND, const Tensor& yp_PD,
                            const Tensor& slot_rows_Nk, const Tensor& weights_Nk, const Tensor& dyp_PD,
                            const Tensor& dweights_Nk);

void grouped_linear_forward(const DeviceContext& ctx, const Tensor& x_PK, const Tensor& w_EMK, const Tensor& counts_E,
                            const Tensor& y_PM);
void grouped_linear_backward_input(const DeviceContext& ctx, const Tensor& dy_PM, const Tensor& w_EMK,
                                   const Tensor& counts_E, const Tensor& dx_PK);
// dw[e] += (or, accumulate false, =) dy[rows of e]^T x[rows of e]; an expert without rows adds nothing
// (or is zeroed).
void grouped_linear_backward_weight(const DeviceContext& ctx, const Tensor& dy_PM, const Tensor& x_PK,
                                    const Tensor& counts_E, const Tensor& dw_EMK, bool accumulate = true);
// The same over two sources of rows (two micro-batches': --moe-expert-wgrad-micro-batches 2,
// model/expert_wgrad_pairs.h), one sum per expert: dw[e] (+)= [dy_a rows of e; dy_b rows of e]^T [x_a rows of e;
// x_b rows of e], the GEMM of the rows merged into one expert order (a's rows of each expert first). The CPU, and
// the CUDA backend where its kernel does not take the call, merge the rows (ops::gather_rows_from_pair, by
// expert_merge_index) and run grouped_linear_backward_weight; the CUDA kernel (CudaBackendOptions::
// grouped_wgrad_kernel, chosen as for the one-source op) reads both sources in place.
void grouped_linear_backward_weight_pair(const DeviceContext& ctx, const Tensor& dy_a_PM, const Tensor& x_a_PK,
                                         const Tensor& counts_a_E, const Tensor& dy_b_PM, const Tensor& x_b_PK,
                                         const Tensor& counts_b_E, const Tensor& dw_EMK, bool accumulate);

}  // namespace quill::ops

namespace quill::ops_detail {
// grouped_linear_backward_weight_pair by merging the rows first: the CPU's path and the CUDA backend's fallback.
void merged_backward_weight_pair(const DeviceContext& ctx, const Tensor& dy_a_PM, const Tensor& x_a_PK,
                                 const Tensor& counts_a_E, const Tensor& dy_b_PM, const Tensor& x_b_PK,
                                 const Tensor& counts_b_E, const Tensor& dw_EMK, bool accumulate);
}  // namespace quill::ops_detail
