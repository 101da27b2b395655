// The head-dim-128 tensor-core attention path (attention_tc_*.cu), called by attention_forward and
// attention_backward (attention_forward.cu, attention_backward.cu) when d == 128; the math and the
// argument checks are theirs (ops/attention.h, attention_common.cuh). Design note:
// docs/decisions/attention-tensor-cores.md.
#pragma once

#include <cstdlib>

#include "ops/attention.h"
#include "ops/cuda/attention_common.cuh"

namespace quill::cuda::attn_tc {

// The head dim this path takes. QUILL_ATTENTION_CUDA_CORES=1 in the environment sends every call to
// the CUDA-core kernels instead (for benchmarks comparing the two; bench/attention/).
inline bool takes(const attn::Problem& p) {
  static const bool cuda_cores = [] {
    const char* v = std::getenv("QUILL_ATTENTION_CUDA_CORES");
    return v != nullptr && v[0] == '1';
  }();
  return p.d == 128 && !cuda_cores;
}

// QUILL_ATTENTION_UNORDERED_DQ=1 lets the backward's key tiles add into dQ in arrival order, as before
// issue 24 (not bit-reproducible): only for the benchmark that measures what the fixed order costs.
inline bool unordered_dq() {
  static const bool unordered = [] {
    const char* v = std::getenv("QUILL_ATTENTION_UNORDERED_DQ");
    return v != nullptr && v[0] == '1';
  }();
  return unordered;
}

// The backward's launch order of its key tiles, chosen per layer by measurement (attention_tc_backward.cu);
// QUILL_ATTENTION_BWD_LONGEST_FIRST=1 forces longest first (tile 0 first), =0 shortest first: a benchmark
// knob. With the fixed-order dQ additions, longest first makes them go lowest key tile first, shortest
// first highest first. Each order is bit-reproducible; the two give different bits (another order of the
// same sums). Returns 1, 0, or -1 when not forced.
// QUILL_ATTENTION_BIAS_GEMM=1: the bias rows and their gradient as cuBLASLt GEMMs (bias_rows_gemm below).
inline bool bias_on_gemm() {
  static const bool on = [] {
    const char* v = std::getenv("QUILL_ATTENTION_BIAS_GEMM");
    if (v == nullptr || v[0] == '\0') return false;
    QUILL_CHECK((v[0] == '0' || v[0] == '1') && v[1] == '\0', "QUILL_ATTENTION_BIAS_GEMM must be 0 or 1, got '{}'", v);
    return v[0] == '1';
  }();
  return on;
}

inline int forced_launch_order() {
  static const int forced = [] {
    const char* v = std::getenv("QUILL_ATTENTION_BWD_LONGEST_FIRST");
    return v == nullptr || v[0] == '\0' ? -1 : (v[0] == '1' ? 1 : 0);
  }();
  return forced;
}

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

// Bias rows and their gradient (attention_tc_bias.cu). rb_THE [T, H, E] fp32 = r . table;
// tau_T [T] fp32 = the log scaling of each position (p.log_scaling on).
void bias_rows(const DeviceContext& ctx, const attn::Problem& p, const Tensor& r_THR, const Tensor& table_RE,
               const Tensor& rb_THE);
void tau_rows(const DeviceContext& ctx, const attn::Problem& p, const Tensor& tau_T);
// The same two as fp32 cuBLASLt GEMMs (attention_tc_bias_gemm.cu), taken when bias_on_gemm(): not yet run on a
// GPU, so opt-in until they have been.
void bias_rows_gemm(const DeviceContext& ctx, const attn::Problem& p, const Tensor& r_THR, const Tensor& table_RE,
                    const Tensor& rb_THE);
void bias_rows_backward_gemm(const DeviceContext& ctx, const attn::Problem& p, const Tensor& r_THR,
                             const Tensor& table_RE, const Tensor& drb_THE, const Tensor& dr_THR,
                             const Tensor& dtable_RE);
// From drb_THE (the gradient of the bias rows): dr_THR (bf16) = drb . table^T, overwritten;
// dtable_RE (fp32) += r^T . drb.
void bias_rows_backward(const DeviceContext& ctx, const attn::Problem& p, const Tensor& r_THR,
                        const Tensor& table_RE, const Tensor& drb_THE, const Tensor& dr_THR, const Tensor& dtable_RE);

}  // namespace quill::cuda::attn_tc
