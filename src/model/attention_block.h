// The attention sub-layer of an Inkling decoder layer, from the normed input to o_proj's output
// (transformers' InklingAttention): q/k/v/r projections, residual short convolutions on k and v,
// per-head RMSNorm of q and k, attention with the relative bias (and log scaling in global layers),
// output projection. Explicit forward and backward; the forward keeps what backward needs.
//
// Under tensor parallelism the block holds its rank's heads (q/k/v/r projections split by heads,
// o_proj by its input columns): the input is gathered from the sequence region before the
// projections and o_proj's partial sums are reduced back into it (parallel/tensor_parallel.h).
//
// Legend: T tokens, D hidden, H query heads, G kv heads (this rank's), d head dim, R d_rel.
#pragma once

#include "model/config.h"
#include "model/fp8_params.h"
#include "model/params.h"
#include "ops/attention.h"
#include "ops/device_context.h"
#include "parallel/tensor_parallel.h"

namespace quill {

class AttentionBlock {
 public:
  AttentionBlock(const InklingConfig& config, int64_t layer, ParamTable& params, const TensorParallel& tp = {});

  struct Saved {
    Tensor x_TD, q_TX, k0_TY, k1_TY, v0_TY, v1_TY, r_TZ, qn_TX, kn_TY, rstd_q, rstd_k, o_TX, lse_HT;
  };
  Tensor forward(const DeviceContext& ctx, const Tensor& x_TD, Saved& saved) const;
  // x_TD: the sequence region's rows. Returns dx (overwritten); accumulates parameter gradients.
  // x_region_again: with --recompute-modules layernorm under --tp-comm-overlap, the normed input's sequence
  // region made again (saved.x_TD was dropped). The block gathers it itself, started after its output
  // gradient's gather: the group's collectives share one stream and complete in the order they start, so the
  // gather needed last (by the projections' weight gradients) goes behind the one needed first and travels
  // beside the attention core's backward (docs/decisions/tp-comm-overlap.md).
  Tensor backward(const DeviceContext& ctx, const Saved& saved, const Tensor& dout_TD,
                  Tensor x_region_again = Tensor()) const;

 private:
  int64_t H_, G_, d_, R_;
  double eps_;
  ops::AttentionParams attn_;
  TensorParallel tp_;
  Param *wq_, *wk_, *wv_, *wr_, *wo_, *q_norm_, *k_norm_, *table_, *k_conv_, *v_conv_;
  // [Wq; Wk; Wv; Wr] as one [Z, D] matrix (Z = H d + 2 G d + H R) when their compute copies lie back to back
  // in that order (placed in one bucket, model/param_placement.h) and none is FP8; undefined otherwise
  // (before placement, a frozen member, FP8). The same for their gradients, when also their write rule agrees.
  Tensor stacked_weights() const;
  Tensor stacked_grads() const;
  // Under FP8 the four matrices' quantised copies joined (StackedFp8Copy), when they stack (every M a multiple of
  // 128) and their gradients lie back to back (all four trained, one bucket): the forward, the input gradient and
  // the weight gradient then run one GEMM each over [T, Z] (docs/decisions/stacked-projections.md). Null otherwise.
  const ops::Fp8Tensor* stacked_fp8(const DeviceContext& ctx) const;
  mutable StackedFp8Copy fp8_stack_;
};

}  // namespace quill
