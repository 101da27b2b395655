// The relative bias of the tensor-core attention path as rows: rb[t, h, u] = sum_i r[t, h, i] *
// table[i, u] for every distance u < E, computed once per call so that the attention kernels add
// rb[t, h, t - s] to a score with one load (R = 16 products per pair on CUDA cores would cost more
// than the pair's tensor-core work). Its gradient comes back the same way: the backward kernel
// stores drb[t, h, t - s] = dz(t, s) (each (t, u) belongs to exactly one key, so plain stores), and
// the GEMMs here reduce it to dr = drb . table^T and dtable += r^T . drb.
// Memory: T * H * E fp32, 0.5 GiB for a local layer of the slice (E = 512), 1 GiB for a global
// one (E = 1024); transient, freed when the attention call returns.
//
// All three are fp32 GEMMs on cuBLASLt (the backend's linear ops, gemm.cu, with fp32 operands:
// CUBLAS_COMPUTE_32F, no TF32; called directly, not through ops/, so the op profile counts them inside the
// attention op) over the T H rows, r converted to fp32 first (T H R floats, 16 MiB for the slice):
//   rb     [TH, E] = r [TH, R] . table [R, E]          linear_backward_input (K = R: bound by rb's write)
//   dr     [TH, R] = drb [TH, E] . table^T             linear_forward, then rounded to bf16
//   dtable [R, E] += r^T . drb                         linear_backward_weight, accumulated
// Each reads or writes the [TH, E] tensor once. They replaced CUDA-core kernels that ran at 0.5-1 TB/s
// (under ncu ~2.2 ms of a local layer's backward, more than its attention kernel): on the H200 the GEMMs
// made the slice's backward 3.55 -> 2.51 ms (local) and 12.78 -> 10.84 ms (global), the forward 0.91 -> 0.86
// and 3.38 -> 3.29 ms (bench/results/2026-12-05-attention-routing). cuBLASLt's results are the same bits on
// every run (its reduction schemes are ordered: issue 24).
#include "ops/cuda/attention_tc.h"
#include "ops/cuda/kernels.h"

namespace quill::cuda::attn_tc {
namespace {

__global__ void tau_rows_kernel(attn::Problem p, float* __restrict__ tau) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t < p.T) tau[t] = attn::tau_at(p, t);
}

// r [T, H, R] bf16 as fp32 rows [T H, R] (cuBLASLt takes all-bf16 or all-fp32 operands).
Tensor r_rows_f32(const DeviceContext& ctx, const attn::Problem& p, const Tensor& r_THR) {
  Tensor r32 = Tensor::empty({static_cast<int64_t>(p.T) * p.H, p.R}, DType::F32, *ctx.allocator);
  convert(ctx, r_THR.reshape({static_cast<int64_t>(p.T) * p.H, p.R}), r32);
  return r32;
}

}  // namespace

void bias_rows(const DeviceContext& ctx, const attn::Problem& p, const Tensor& r_THR, const Tensor& table_RE,
               const Tensor& rb_THE) {
  const int64_t n_rows = static_cast<int64_t>(p.T) * p.H;
  if (n_rows == 0 || p.E == 0) return;
  if (p.R == 0) {  // no bias rank: the bias is zero
    QUILL_CUDA_CHECK(cudaMemsetAsync(rb_THE.data(), 0, rb_THE.nbytes(), stream_of(ctx)));
    return;
  }
  linear_backward_input(ctx, r_rows_f32(ctx, p, r_THR), table_RE, rb_THE.reshape({n_rows, p.E}), false);
}

void tau_rows(const DeviceContext& ctx, const attn::Problem& p, const Tensor& tau_T) {
  if (p.T == 0) return;
  tau_rows_kernel<<<(p.T + 255) / 256, 256, 0, stream_of(ctx)>>>(p, tau_T.data_as<float>());
  QUILL_CUDA_CHECK_LAUNCH("tau_rows_kernel");
}

void bias_rows_backward(const DeviceContext& ctx, const attn::Problem& p, const Tensor& r_THR, const Tensor& table_RE,
                        const Tensor& drb_THE, const Tensor& dr_THR, const Tensor& dtable_RE) {
  const int64_t n_rows = static_cast<int64_t>(p.T) * p.H;
  if (n_rows == 0 || p.R == 0) return;
  if (p.E == 0) {  // no distance carries a bias: dr is zero, dtable unchanged
    QUILL_CUDA_CHECK(cudaMemsetAsync(dr_THR.data(), 0, dr_THR.nbytes(), stream_of(ctx)));
    return;
  }
  const Tensor drb = drb_THE.reshape({n_rows, p.E});
  Tensor dr32 = Tensor::empty({n_rows, p.R}, DType::F32, *ctx.allocator);
  linear_forward(ctx, drb, table_RE, dr32);
  convert(ctx, dr32, dr_THR.reshape({n_rows, p.R}));
  // A frozen table's gradient is not wanted (ops/attention.h): no r rows in fp32, no GEMM over every query.
  if (dtable_RE.defined()) linear_backward_weight(ctx, r_rows_f32(ctx, p, r_THR), drb, dtable_RE, true);
}

}  // namespace quill::cuda::attn_tc
