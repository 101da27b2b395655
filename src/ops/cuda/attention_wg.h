// The Hopper (wgmma + TMA, FlashAttention-3 style) attention forward for head dim 128 on sm_90a: a
// path beside the mma.sync kernels (attention_tc.h), which stay the default. Same math, arguments and
// outputs as ops::attention_forward (ops/attention.h). Design note: docs/decisions/attention-wgmma.md.
//
// QUILL_ATTENTION_WGMMA in the environment sends attention_forward's head-dim-128 calls here:
//   1  the default form (P V as wgmma.m64n128k16)
//   2  the split form (P V as two wgmma.m64n64k16 per k-step; a debugging aid for the MN-major
//      descriptor's LBO, which only the m64n128 form uses)
//   3  the setmaxnreg form (the default one with the producer's registers given to the consumers)
//   4  the wide form (128-key tiles, 256 threads: thread 0 issues the loads; not yet run on a GPU)
// Unset or 0: the mma.sync path. QUILL_ATTENTION_CUDA_CORES=1 still wins over both.
// Plain C++ (no CUDA headers): the tests and the benchmark call it directly.
#pragma once

#include "ops/attention.h"

namespace quill::cuda::attn_wg {

struct Options {
  bool split_pv = false;    // the split P V form (see above)
  bool setmaxnreg = false;  // the form with setmaxnreg (producer 40 / consumers 232 registers); not with split_pv
  bool wide = false;        // the wide form: 128-key tiles, 256 threads, no producer warpgroup (exclusive of the others)
  bool sync_check = false;  // synchronise after the kernel and name it in the error (tests, self-checks)
};

// 0 off, 1 default form, 2 split form, 3 setmaxnreg form, 4 wide form (QUILL_ATTENTION_WGMMA, read once).
int requested_mode();

// Which head-dim-128 backward ops::attention_backward runs (QUILL_ATTENTION_WGMMA_BWD, read once): unset or 0,
// the mma.sync backward; 1 the wgmma backward below for every layer; 2 the wgmma backward for global
// (unwindowed) layers on sm_90 and the mma.sync one for windowed layers, the faster of the two for each
// (bench/results/2026-12-05-attention-wgmma-backward). 2 becomes the default once the backward's present form
// (bias staged from the rows) has passed its tests on the H200; it has not run on a GPU yet.
int backward_mode();

// True when the current device can run this path (compute capability 9.0).
bool device_supported();

void attention_forward_wgmma(const DeviceContext& ctx, const Tensor& q_THd, const Tensor& k_TGd, const Tensor& v_TGd,
                             const Tensor& r_THR, const Tensor& table_RE, const ops::AttentionParams& params,
                             const Tensor& out_THd, const Tensor& lse_HT, const Options& options = {});

// The mma.sync backward whatever QUILL_ATTENTION_WGMMA_BWD says (attention_backward.cu): the reference the
// wgmma backward is tested and benchmarked against. ops::attention_backward's arguments; head dim 128.
void attention_backward_mma_sync(const DeviceContext& ctx, const Tensor& q_THd, const Tensor& k_TGd,
                                 const Tensor& v_TGd, const Tensor& r_THR, const Tensor& table_RE,
                                 const ops::AttentionParams& params, const Tensor& out_THd, const Tensor& lse_HT,
                                 const Tensor& dout_THd, const Tensor& dq_THd, const Tensor& dk_TGd,
                                 const Tensor& dv_TGd, const Tensor& dr_THR, const Tensor& dtable_RE);

// The Hopper backward (attention_wg_backward.cu): ops::attention_backward's arguments and outputs, head dim
// 128 only. Options: only sync_check applies.
void attention_backward_wgmma(const DeviceContext& ctx, const Tensor& q_THd, const Tensor& k_TGd, const Tensor& v_TGd,
                              const Tensor& r_THR, const Tensor& table_RE, const ops::AttentionParams& params,
                              const Tensor& out_THd, const Tensor& lse_HT, const Tensor& dout_THd, const Tensor& dq_THd,
                              const Tensor& dk_TGd, const Tensor& dv_TGd, const Tensor& dr_THR, const Tensor& dtable_RE,
                              const Options& options = {});

}  // namespace quill::cuda::attn_wg
