// The head-dim-128 tensor-core attention path (attention_tc_*.cu), called by attention_forward and
// attention_backward (attention_forward.cu, attention_backward.cu) when d == 128; the math and the
// argument checks are theirs (ops/attention.h, attention_common.cuh). Design note:
// docs/decisions/attention-tensor-cores.md.
#pragma once

#include "ops/attention.h"
#include "ops/cuda/attention_bias_rows.h"
#include "ops/cuda/attention_common.cuh"
#include "ops/cuda/cuda_resources.h"

namespace quill::cuda::attn_tc {

// The head dim this path takes (every other head dim: the CUDA-core kernels of attention_forward.cu /
// attention_backward.cu, the reference path).
inline bool takes(const attn::Problem& p) { return p.d == 128; }

// The backward's dQ additions in arrival order instead of the fixed one (not bit-reproducible: a noise
// floor for comparing runs; CudaBackendOptions::attention_dq_arrival_order, --attention-dq-order arrival).
inline bool arrival_order_dq(const DeviceContext& ctx) { return ctx.cuda->attention_dq_arrival_order; }

void forward(const DeviceContext& ctx, const attn::Problem& p, const Tensor& q_THd, const Tensor& k_TGd,
             const Tensor& v_TGd, const Tensor& r_THR, const Tensor& table_RE, const Tensor& out_THd,
             const Tensor& lse_HT);
// D_HT [H, T] fp32: D[h, t] = dout[t, h] . out[t, h] (attention_backward.cu computes it for both paths).
void backward(const DeviceContext& ctx, const attn::Problem& p, const Tensor& q_THd, const Tensor& k_TGd,
              const Tensor& v_TGd, const Tensor& r_THR, const Tensor& table_RE, const Tensor& lse_HT,
              const Tensor& D_HT, const Tensor& dout_THd, const Tensor& dq_THd, const Tensor& dk_TGd,
              const Tensor& dv_TGd, const Tensor& dr_THR, const Tensor& dtable_RE);

// The pieces the wgmma backward (attention_wg_backward.cu) shares with this one: drb [T, H, E] fp32, zeroed
// where no allowed pair stores; dq (bf16) = scale * the fp32 accumulator dq_acc [H][2][T_pad][64] in
// attention_dq.cuh's layout.
Tensor zeroed_bias_grad(const DeviceContext& ctx, const attn::Problem& p);
void finish_dq(const DeviceContext& ctx, const attn::Problem& p, const Tensor& dq_acc, const Tensor& dq_THd);

using attn_bias::BiasRowsPath;  // how rb and dr are computed (attention_bias_rows.h)
// The ops' path: CudaBackendOptions::attention_bias_rows (--attention-bias-rows).
inline BiasRowsPath bias_rows_path(const DeviceContext& ctx) { return ctx.cuda->attention_bias_rows; }

// Bias rows and their gradient (attention_tc_bias.cu). rb_THE [T, H, E] fp32 = r . table;
// tau_T [T] fp32 = the log scaling of each position (p.log_scaling on).
void bias_rows(const DeviceContext& ctx, const attn::Problem& p, const Tensor& r_THR, const Tensor& table_RE,
               const Tensor& rb_THE, BiasRowsPath path);
void tau_rows(const DeviceContext& ctx, const attn::Problem& p, const Tensor& tau_T);
// From drb_THE (the gradient of the bias rows): dr_THR (bf16) = drb . table^T, overwritten;
// dtable_RE (fp32) += r^T . drb.
void bias_rows_backward(const DeviceContext& ctx, const attn::Problem& p, const Tensor& r_THR,
                        const Tensor& table_RE, const Tensor& drb_THE, const Tensor& dr_THR, const Tensor& dtable_RE,
                        BiasRowsPath path);

}  // namespace quill::cuda::attn_tc
