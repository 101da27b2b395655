// The Hopper (wgmma + TMA, FlashAttention-3 style) attention for head dim 128 on sm_90a, forward and backward,
// beside the mma.sync kernels (attention_tc.h). Same math, arguments and outputs as ops::attention_forward and
// ops::attention_backward (ops/attention.h). Design note: docs/decisions/attention-wgmma.md.
//
// ops::attention_forward / attention_backward route a call here (takes, attention_wg_internal.h): head dim 128, a global
// (unwindowed) layer, an sm_90 device. Chosen by measurement on the H200 (bench/results/2026-12-05-attention-
// routing): on global layers both directions are faster here (forward 2.80 vs 3.29 ms, backward 8.41 vs 10.84 ms
// at the slice's 32 q / 8 kv heads; 0.79 vs 0.89 and 3.43 vs 4.37 ms at a TP4 rank's 8 / 2), on local
// (window 512) layers the mma.sync kernels are (forward 0.86 vs 1.02 ms, backward 2.51 vs 2.59 ms).
// Plain C++ (no CUDA headers): the tests and the benchmark call it directly.
#pragma once

#include "ops/attention.h"
#include "ops/kernel_trials.h"

namespace quill::cuda::attn_wg {

struct Options {
  bool sync_check = false;  // synchronise after the kernel and name it in the error (tests, self-checks)
  // The forward's key tiles (--attention-forward-form, ops/kernel_trials.h): the ops pass the run's choice
  // (CudaBackendOptions::attention_forward_form); tests and attention_bench name one.
  AttentionForwardForm forward_form = AttentionForwardForm::kNarrow;
  // The backward's form (--attention-backward-form): the consumers load and add dQ themselves, or a producer
  // warpgroup does (attention_wg_backward.cu).
  AttentionBackwardForm backward_form = AttentionBackwardForm::kConsumers;
};

// True when the current device can run this path (compute capability 9.0).
bool device_supported();

void attention_forward_wgmma(const DeviceContext& ctx, const Tensor& q_THd, const Tensor& k_TGd, const Tensor& v_TGd,
                             const Tensor& r_THR, const Tensor& table_RE, const ops::AttentionParams& params,
                             const Tensor& out_THd, const Tensor& lse_HT, const Options& options = {});

// The mma.sync forward and backward whatever takes() says (attention_forward.cu, attention_backward.cu): the
// references the wgmma kernels are tested and benchmarked against. ops::attention_backward's arguments; head dim 128.
void attention_forward_mma_sync(const DeviceContext& ctx, const Tensor& q_THd, const Tensor& k_TGd, const Tensor& v_TGd,
                                const Tensor& r_THR, const Tensor& table_RE, const ops::AttentionParams& params,
                                const Tensor& out_THd, const Tensor& lse_HT);
void attention_backward_mma_sync(const DeviceContext& ctx, const Tensor& q_THd, const Tensor& k_TGd,
                                 const Tensor& v_TGd, const Tensor& r_THR, const Tensor& table_RE,
                                 const ops::AttentionParams& params, const Tensor& out_THd, const Tensor& lse_HT,
                                 const Tensor& dout_THd, const Tensor& dq_THd, const Tensor& dk_TGd,
                                 const Tensor& dv_TGd, const Tensor& dr_THR, const Tensor& dtable_RE);

// The Hopper backward (attention_wg_backward.cu): ops::attention_backward's arguments and outputs, head dim
// 128 only.
void attention_backward_wgmma(const DeviceContext& ctx, const Tensor& q_THd, const Tensor& k_TGd, const Tensor& v_TGd,
                              const Tensor& r_THR, const Tensor& table_RE, const ops::AttentionParams& params,
                              const Tensor& out_THd, const Tensor& lse_HT, const Tensor& dout_THd, const Tensor& dq_THd,
                              const Tensor& dk_TGd, const Tensor& dv_TGd, const Tensor& dr_THR, const Tensor& dtable_RE,
                              const Options& options = {});

}  // namespace quill::cuda::attn_wg
