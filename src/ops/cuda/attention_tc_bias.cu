// The relative bias of the tensor-core attention path as rows: rb[t, h, u] = sum_i r[t, h, i] *
// table[i, u] for every distance u < E, computed once per call so that the attention kernels add
// rb[t, h, t - s] to a score with one load (R = 16 products per pair on CUDA cores would cost more
// than the pair's tensor-core work). Its gradient comes back the same way: the backward kernel
// stores drb[t, h, t - s] = dz(t, s) (each (t, u) belongs to exactly one key, so plain stores), and
// the kernels here reduce it to dr = drb . table^T and dtable += r^T . drb.
// Memory: T * H * E fp32, 0.5 GiB for a local layer of the slice (E = 512), 1 GiB for a global
// one (E = 1024); transient, freed when the attention call returns.
//
// Each reads or writes the [TH, E] tensor once, so each is bound by that tensor's bytes. Two paths (BiasRowsPath,
// attention_bias_rows.h), the ops' chosen per run by --attention-bias-rows: cuBLASLt's fp32 GEMMs for all three (the
// default) or the kernels below for rb and dr (an experiment, not yet run on a GPU; attention_bench and the
// CudaAttentionBiasRows tests call both paths directly):
//   rb     [TH, E] = r [TH, R] . table [R, E]      bias_rows_kernel (R <= 16): each thread keeps its four
//                                                  columns of the table in registers and walks the block's 64
//                                                  rows, their r staged in shared memory once; 16 FMAs per
//                                                  output in i order.
//   dr     [TH, R] = drb [TH, E] . table^T         dr_rows_kernel (R <= 16): a warp takes 4 rows at a time, each
//                                                  lane the columns u = lane mod 32 with the table in shared
//                                                  memory, then halves its 16 sums across the warp in a fixed
//                                                  order; then rounded to dr's dtype
//   dtable [R, E] += r^T . drb                     cuBLASLt's fp32 GEMM, accumulated (frozen in Miles' recipe)
// R > 16 (and dr at E > 2,048) takes cuBLASLt's fp32 GEMMs on either path. Why not cuBLASLt for rb and dr
// (measured on an H100 at a TP4 rank's local layer, T 8,192, 8 heads, E 512, 134 MB each:
// bench/results/2026-12-07-h100-wgrad-pingpong-attention-ncu): its fp32 GEMMs ran on the CUDA cores at
// 1.7 TB/s, 77 us for rb (twice per layer: the backward recomputes it) and 82 + 19 (split-K) for dr, a third
// of the local layer's backward with the table frozen. Before the GEMMs (until 2026-12-05) CUDA-core kernels
// ran at 0.5-1 TB/s. Every order of summation here is fixed: the same bits on every run (issue 24).
#include "ops/cuda/attention_common.cuh"
#include "ops/cuda/attention_tc.h"
#include "ops/cuda/kernels.h"

#include <cuda_bf16.h>

#include <algorithm>

namespace quill::cuda::attn_tc {
namespace {

constexpr int kMaxRank = 16;  // the kernels' bias rank (Inkling's R); larger ones take cuBLASLt
constexpr int kRowsThreads = 128, kRowsColumns = 4 * kRowsThreads, kRowsPerBlock = 64;
constexpr int kDrWarps = 8, kDrRows = 4;  // dr: warps per block, rows per warp at a time
constexpr int kDrMaxExtent = 2048;        // dr's table in shared memory: 16 x 2,048 floats at most (128 KiB)

__device__ __forceinline__ float as_float(float v) { return v; }
__device__ __forceinline__ float as_float(__nv_bfloat16 v) { return __bfloat162float(v); }

// rb [rows, E] = r [rows, R] . table [R, E]; block (x: 512 columns, y: 64 rows).
template <class TR>
__global__ void __launch_bounds__(kRowsThreads) bias_rows_kernel(const TR* __restrict__ r, int64_t rows, int R,
                                                                 const float* __restrict__ table, int E,
                                                                 float* __restrict__ rb) {
  // The block's rows of r, as fp32 in shared memory (rows past the end and ranks past R are zeros).
  __shared__ float r_s[kRowsPerBlock * kMaxRank];
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * kRowsPerBlock;
  for (int k = threadIdx.x; k < kRowsPerBlock * kMaxRank; k += blockDim.x) {
    const int64_t row = row0 + k / kMaxRank;
    const int i = k % kMaxRank;
    r_s[k] = (row < rows && i < R) ? as_float(r[row * R + i]) : 0.f;
  }
  __syncthreads();
  const int u0 = blockIdx.x * kRowsColumns + 4 * threadIdx.x;
  if (u0 >= E) return;
  const bool whole = (E % 4 == 0);  // rows start 16-byte aligned: one float4 store per thread and row
  float tab[kMaxRank][4];
#pragma unroll
  for (int i = 0; i < kMaxRank; ++i)
#pragma unroll
    for (int c = 0; c < 4; ++c) tab[i][c] = (i < R && u0 + c < E) ? table[static_cast<int64_t>(i) * E + u0 + c] : 0.f;
  const int row_count = static_cast<int>(std::min<int64_t>(rows - row0, kRowsPerBlock));
  for (int q = 0; q < row_count; ++q) {
    const int64_t row = row0 + q;
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int i = 0; i < kMaxRank; ++i) {
      if (i < R) {
        const float ri = r_s[q * kMaxRank + i];  // the same word in every thread: a broadcast
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[c] = fmaf(ri, tab[i][c], acc[c]);
      }
    }
    float* out = rb + row * E + u0;
    if (whole) {
      *reinterpret_cast<float4*>(out) = make_float4(acc[0], acc[1], acc[2], acc[3]);
    } else {
#pragma unroll
      for (int c = 0; c < 4; ++c)
        if (u0 + c < E) out[c] = acc[c];
    }
  }
}

// One halving step of dr_rows_kernel's reduction: each lane keeps kHalf of its 2 kHalf sums (the upper ones where its
// lane bit 2 kHalf is set) and adds its partner's (lane ^ 2 kHalf) same ones.
template <int kHalf>
__device__ __forceinline__ void halve_sums(float (&a)[kMaxRank], int lane) {
  const bool upper = (lane & (2 * kHalf)) != 0;
#pragma unroll
  for (int k = 0; k < kHalf; ++k) {
    const float keep = upper ? a[k + kHalf] : a[k], give = upper ? a[k] : a[k + kHalf];
    a[k] = keep + __shfl_xor_sync(0xffffffffu, give, 2 * kHalf);
  }
}

// dr [rows, R] = drb [rows, E] . table^T (fp32). The table [R, E] sits in shared memory (rows i >= R zero). A warp
// takes kDrRows rows at a time; lane l sums the columns u = l, l + 32, ... of each (16 sums a row, the table's
// value read once for the kDrRows rows), then the warp halves its 16 sums four times (offsets 16, 8, 4, 2: each lane
// keeps half of its sums and adds its partner's) and adds lane pairs: lane 2 i holds row's dr[i].
__global__ void __launch_bounds__(kDrWarps * 32) dr_rows_kernel(const float* __restrict__ drb, int64_t rows, int R,
                                                                const float* __restrict__ table, int E,
                                                                float* __restrict__ dr) {
  extern __shared__ float tab_s[];  // [kMaxRank][E]
  for (int k = threadIdx.x; k < kMaxRank * E; k += blockDim.x) tab_s[k] = k / E < R ? table[k] : 0.f;
  __syncthreads();
  const int lane = threadIdx.x % 32;
  const int64_t groups = (rows + kDrRows - 1) / kDrRows;
  const int64_t warp0 = static_cast<int64_t>(blockIdx.x) * kDrWarps + threadIdx.x / 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kDrWarps;
  for (int64_t grp = warp0; grp < groups; grp += warps) {
    const int64_t row0 = grp * kDrRows;
    float acc[kDrRows][kMaxRank];
#pragma unroll
    for (int q = 0; q < kDrRows; ++q)
#pragma unroll
      for (int i = 0; i < kMaxRank; ++i) acc[q][i] = 0.f;
    // Four columns per pass, so that each lane has 16 loads in flight (the kernel is bound by drb's bytes).
#pragma unroll 4
    for (int u = lane; u < E; u += 32) {
      float v[kDrRows];
#pragma unroll
      for (int q = 0; q < kDrRows; ++q) v[q] = row0 + q < rows ? drb[(row0 + q) * E + u] : 0.f;
#pragma unroll
      for (int i = 0; i < kMaxRank; ++i) {
        const float t = tab_s[i * E + u];
#pragma unroll
        for (int q = 0; q < kDrRows; ++q) acc[q][i] = fmaf(v[q], t, acc[q][i]);
      }
    }
#pragma unroll
    for (int q = 0; q < kDrRows; ++q) {
      float (&a)[kMaxRank] = acc[q];
      static_assert(kMaxRank == 16, "dr_rows_kernel: four halvings take 16 sums to one per lane pair");
      halve_sums<8>(a, lane);  // partner lane ^ 16
      halve_sums<4>(a, lane);  // ^ 8
      halve_sums<2>(a, lane);  // ^ 4
      halve_sums<1>(a, lane);  // ^ 2
      const float sum = a[0] + __shfl_xor_sync(0xffffffffu, a[0], 1);  // a + b and b + a: the same bits
      const int i = lane / 2;
      if ((lane & 1) == 0 && i < R && row0 + q < rows) dr[(row0 + q) * R + i] = sum;
    }
  }
}

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
               const Tensor& rb_THE, BiasRowsPath path) {
  const int64_t n_rows = static_cast<int64_t>(p.T) * p.H;
  if (n_rows == 0 || p.E == 0) return;
  if (p.R == 0) {  // no bias rank: the bias is zero
    QUILL_CUDA_CHECK(cudaMemsetAsync(rb_THE.data(), 0, rb_THE.nbytes(), stream_of(ctx)));
    return;
  }
  if (path == BiasRowsPath::kCublasLt || p.R > kMaxRank) {
    linear_backward_input(ctx, r_rows_f32(ctx, p, r_THR), table_RE, rb_THE.reshape({n_rows, p.E}), false);
    return;
  }
  const dim3 grid(static_cast<unsigned>((p.E + kRowsColumns - 1) / kRowsColumns),
                  static_cast<unsigned>((n_rows + kRowsPerBlock - 1) / kRowsPerBlock));
  auto launch = [&](auto* r) {
    bias_rows_kernel<<<grid, kRowsThreads, 0, stream_of(ctx)>>>(r, n_rows, p.R, table_RE.data_as<float>(), p.E,
                                                                 rb_THE.data_as<float>());
  };
  if (r_THR.dtype() == DType::BF16) launch(r_THR.data_as<__nv_bfloat16>());
  else launch(r_THR.data_as<float>());
  QUILL_CUDA_CHECK_LAUNCH("bias_rows_kernel");
}

void tau_rows(const DeviceContext& ctx, const attn::Problem& p, const Tensor& tau_T) {
  if (p.T == 0) return;
  tau_rows_kernel<<<(p.T + 255) / 256, 256, 0, stream_of(ctx)>>>(p, tau_T.data_as<float>());
  QUILL_CUDA_CHECK_LAUNCH("tau_rows_kernel");
}

void bias_rows_backward(const DeviceContext& ctx, const attn::Problem& p, const Tensor& r_THR, const Tensor& table_RE,
                        const Tensor& drb_THE, const Tensor& dr_THR, const Tensor& dtable_RE, BiasRowsPath path) {
  const int64_t n_rows = static_cast<int64_t>(p.T) * p.H;
  if (n_rows == 0 || p.R == 0) return;
  if (p.E == 0) {  // no distance carries a bias: dr is zero, dtable unchanged
    QUILL_CUDA_CHECK(cudaMemsetAsync(dr_THR.data(), 0, dr_THR.nbytes(), stream_of(ctx)));
    return;
  }
  const Tensor drb = drb_THE.reshape({n_rows, p.E});
  Tensor dr32 = Tensor::empty({n_rows, p.R}, DType::F32, *ctx.allocator);
  if (path == BiasRowsPath::kCublasLt || p.R > kMaxRank || p.E > kDrMaxExtent) {
    linear_forward(ctx, drb, table_RE, dr32);
  } else {
    const size_t smem = static_cast<size_t>(kMaxRank) * p.E * sizeof(float);
    attn::set_smem("attention_backward (dr rows)", reinterpret_cast<const void*>(&dr_rows_kernel), smem);
    int dev = 0, sms = 0;
    QUILL_CUDA_CHECK(cudaGetDevice(&dev));
    QUILL_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    const int64_t groups = (n_rows + kDrRows - 1) / kDrRows;
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((groups + kDrWarps - 1) / kDrWarps, 4 * sms));
    dr_rows_kernel<<<blocks, kDrWarps * 32, smem, stream_of(ctx)>>>(drb.data_as<float>(), n_rows, p.R,
                                                                    table_RE.data_as<float>(), p.E,
                                                                    dr32.data_as<float>());
    QUILL_CUDA_CHECK_LAUNCH("dr_rows_kernel");
  }
  convert(ctx, dr32, dr_THR.reshape({n_rows, p.R}));
  // A frozen table's gradient is not wanted (ops/attention.h): no r rows in fp32, no GEMM over every query.
  if (dtable_RE.defined()) linear_backward_weight(ctx, r_rows_f32(ctx, p, r_THR), drb, dtable_RE, true);
}

}  // namespace quill::cuda::attn_tc

namespace quill::cuda::attn_bias {
namespace {

attn::Problem problem_of(int64_t T, int64_t H, int64_t R, int64_t E) {
  attn::Problem p{};
  p.T = static_cast<int>(T), p.H = static_cast<int>(H), p.G = 1, p.d = 128, p.R = static_cast<int>(R);
  p.E = static_cast<int>(E);
  return p;
}

}  // namespace

void bias_rows(const DeviceContext& ctx, int64_t T, int64_t H, int64_t R, int64_t E, const Tensor& r_THR,
               const Tensor& table_RE, const Tensor& rb_THE, BiasRowsPath path) {
  attn_tc::bias_rows(ctx, problem_of(T, H, R, E), r_THR, table_RE, rb_THE, path);
}

void bias_rows_backward(const DeviceContext& ctx, int64_t T, int64_t H, int64_t R, int64_t E, const Tensor& r_THR,
                        const Tensor& table_RE, const Tensor& drb_THE, const Tensor& dr_THR, const Tensor& dtable_RE,
                        BiasRowsPath path) {
  attn_tc::bias_rows_backward(ctx, problem_of(T, H, R, E), r_THR, table_RE, drb_THE, dr_THR, dtable_RE, path);
}

}  // namespace quill::cuda::attn_bias
