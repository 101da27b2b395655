// The relative bias of the tensor-core attention path as rows: rb[t, h, u] = sum_i r[t, h, i] *
// table[i, u] for every distance u < E, computed once per call so that the attention kernels add
// rb[t, h, t - s] to a score with one load (R = 16 products per pair on CUDA cores would cost more
// than the pair's tensor-core work). Its gradient comes back the same way: the backward kernel
// stores drb[t, h, t - s] = dz(t, s) (each (t, u) belongs to exactly one key, so plain stores), and
// the kernels here reduce it to dr = drb . table^T and dtable += r^T . drb.
// Memory: T * H * E fp32, 0.5 GiB for a local layer of the slice (E = 512), 1 GiB for a global
// one (E = 1024); transient, freed when the attention call returns.
// All arithmetic fp32; dtable's sums are per row chunk, added in chunk order (no float atomics).
#include "ops/cuda/attention_tc.h"
#include "ops/cuda/ordered_sum.h"

namespace quill::cuda::attn_tc {
namespace {

constexpr int kColThreads = 128;  // distances per CTA (one per thread)
constexpr int kRowsPerCta = 64;   // (t, h) rows per CTA in rb and dtable
constexpr int kMaxRank = 64;      // as make_problem allows

// r_s[rr][i] = r[row0 + rr, i] (fp32) for the CTA's 64 rows, zero past n_rows; all kColThreads threads.
template <int RMAX>
__device__ __forceinline__ void load_r_rows(float (*r_s)[RMAX], const __nv_bfloat16* __restrict__ r, int64_t row0,
                                            int64_t n_rows, int R) {
  for (int idx = threadIdx.x; idx < kRowsPerCta * R; idx += kColThreads) {
    const int rr = idx / R, i = idx % R;
    r_s[rr][i] = row0 + rr < n_rows ? __bfloat162float(r[(row0 + rr) * R + i]) : 0.0f;
  }
}

// rb[row, u] for rows row0 .. row0+63: thread u keeps table[:, u] in registers, r rows come from
// shared memory; stores are coalesced along u.
template <int RMAX>
__global__ void bias_rows_kernel(int64_t n_rows, int R, int E, const __nv_bfloat16* __restrict__ r,
                                 const float* __restrict__ table, float* __restrict__ rb) {
  __shared__ float r_s[kRowsPerCta][RMAX];
  const int u = blockIdx.x * kColThreads + threadIdx.x;
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * kRowsPerCta;
  load_r_rows(r_s, r, row0, n_rows, R);
  __syncthreads();
  if (u >= E) return;
  float tab[RMAX];
#pragma unroll
  for (int i = 0; i < RMAX; ++i) tab[i] = i < R ? table[static_cast<int64_t>(i) * E + u] : 0.0f;
  for (int rr = 0; rr < kRowsPerCta && row0 + rr < n_rows; ++rr) {
    float acc = 0.0f;
#pragma unroll
    for (int i = 0; i < RMAX; ++i)
      if (i < R) acc = fmaf(r_s[rr][i], tab[i], acc);
    rb[(row0 + rr) * E + u] = acc;
  }
}

// dr[row, i] = sum_u drb[row, u] * table[i, u]; one warp per row, lanes split u, then a warp sum.
template <int RMAX>
__global__ void bias_rows_dr_kernel(int64_t n_rows, int R, int E, const float* __restrict__ drb,
                                    const float* __restrict__ table, __nv_bfloat16* __restrict__ dr) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= n_rows) return;
  float acc[RMAX];
#pragma unroll
  for (int i = 0; i < RMAX; ++i) acc[i] = 0.0f;
  const float* g = drb + row * E;
  for (int u = lane; u < E; u += 32) {
    const float x = g[u];
#pragma unroll
    for (int i = 0; i < RMAX; ++i)
      if (i < R) acc[i] = fmaf(x, __ldg(table + static_cast<int64_t>(i) * E + u), acc[i]);
  }
#pragma unroll
  for (int i = 0; i < RMAX; ++i) {
    float s = acc[i];
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
    if (lane == 0 && i < R) dr[row * R + i] = __float2bfloat16(s);
  }
}

// dtable[i, u] += sum over rows of r[row, i] * drb[row, u]; a CTA sums kDtableRows rows for 128
// distances, then writes its partial sums to its chunk's row of the scratch.
constexpr int kDtableRows = 1024;
template <int RMAX>
__global__ void bias_rows_dtable_kernel(int64_t n_rows, int R, int E, const __nv_bfloat16* __restrict__ r,
                                        const float* __restrict__ drb, float* __restrict__ partials) {
  // This block's sums go to row blockIdx.y of partials [row chunks, R*E]; the chunks' rows are added
  // to dtable in chunk order afterwards (ordered_sum.h: no float atomics, the same bits every run).
  float* dtable = partials + static_cast<int64_t>(blockIdx.y) * R * E;
  __shared__ float r_s[kRowsPerCta][RMAX];
  const int u = blockIdx.x * kColThreads + threadIdx.x;
  const int64_t first = static_cast<int64_t>(blockIdx.y) * kDtableRows;
  float acc[RMAX];
#pragma unroll
  for (int i = 0; i < RMAX; ++i) acc[i] = 0.0f;
  for (int64_t row0 = first; row0 < first + kDtableRows && row0 < n_rows; row0 += kRowsPerCta) {
    __syncthreads();
    load_r_rows(r_s, r, row0, n_rows, R);
    __syncthreads();
    if (u < E) {
      for (int rr = 0; rr < kRowsPerCta && row0 + rr < n_rows; ++rr) {
        const float x = drb[(row0 + rr) * E + u];
#pragma unroll
        for (int i = 0; i < RMAX; ++i)
          if (i < R) acc[i] = fmaf(r_s[rr][i], x, acc[i]);
      }
    }
  }
  if (u >= E) return;
#pragma unroll
  for (int i = 0; i < RMAX; ++i)
    if (i < R) dtable[static_cast<int64_t>(i) * E + u] = acc[i];
}

__global__ void tau_rows_kernel(attn::Problem p, float* __restrict__ tau) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t < p.T) tau[t] = attn::tau_at(p, t);
}

}  // namespace

void bias_rows(const DeviceContext& ctx, const attn::Problem& p, const Tensor& r_THR, const Tensor& table_RE,
               const Tensor& rb_THE) {
  if (bias_on_gemm()) return bias_rows_gemm(ctx, p, r_THR, table_RE, rb_THE);
  const int64_t n_rows = static_cast<int64_t>(p.T) * p.H;
  if (n_rows == 0 || p.E == 0) return;
  const dim3 grid((p.E + kColThreads - 1) / kColThreads, static_cast<unsigned>((n_rows + kRowsPerCta - 1) / kRowsPerCta));
  const auto* r = r_THR.data_as<__nv_bfloat16>();
  const auto* table = table_RE.data_as<float>();
  if (p.R <= 16)
    bias_rows_kernel<16><<<grid, kColThreads, 0, stream_of(ctx)>>>(n_rows, p.R, p.E, r, table, rb_THE.data_as<float>());
  else
    bias_rows_kernel<kMaxRank><<<grid, kColThreads, 0, stream_of(ctx)>>>(n_rows, p.R, p.E, r, table,
                                                                         rb_THE.data_as<float>());
  QUILL_CUDA_CHECK_LAUNCH("bias_rows_kernel");
}

void tau_rows(const DeviceContext& ctx, const attn::Problem& p, const Tensor& tau_T) {
  if (p.T == 0) return;
  tau_rows_kernel<<<(p.T + 255) / 256, 256, 0, stream_of(ctx)>>>(p, tau_T.data_as<float>());
  QUILL_CUDA_CHECK_LAUNCH("tau_rows_kernel");
}

void bias_rows_backward(const DeviceContext& ctx, const attn::Problem& p, const Tensor& r_THR, const Tensor& table_RE,
                        const Tensor& drb_THE, const Tensor& dr_THR, const Tensor& dtable_RE) {
  if (bias_on_gemm()) return bias_rows_backward_gemm(ctx, p, r_THR, table_RE, drb_THE, dr_THR, dtable_RE);
  const int64_t n_rows = static_cast<int64_t>(p.T) * p.H;
  if (n_rows == 0 || p.R == 0) return;
  const cudaStream_t stream = stream_of(ctx);
  if (p.E == 0) {  // no distance carries a bias: dr is zero, dtable unchanged
    QUILL_CUDA_CHECK(cudaMemsetAsync(dr_THR.data(), 0, dr_THR.nbytes(), stream));
    return;
  }
  constexpr int kWarps = 8;
  const auto dr_blocks = static_cast<unsigned>((n_rows + kWarps - 1) / kWarps);
  const dim3 dt_grid((p.E + kColThreads - 1) / kColThreads,
                     static_cast<unsigned>((n_rows + kDtableRows - 1) / kDtableRows));
  const auto* r = r_THR.data_as<__nv_bfloat16>();
  const auto* table = table_RE.data_as<float>();
  const auto* drb = drb_THE.data_as<float>();
  Tensor partials = Tensor::empty({static_cast<int64_t>(dt_grid.y), static_cast<int64_t>(p.R) * p.E}, DType::F32,
                                  *ctx.allocator);
  float* dtable = partials.data_as<float>();
  if (p.R <= 16) {
    bias_rows_dr_kernel<16><<<dr_blocks, 32 * kWarps, 0, stream>>>(n_rows, p.R, p.E, drb, table,
                                                                  dr_THR.data_as<__nv_bfloat16>());
    bias_rows_dtable_kernel<16><<<dt_grid, kColThreads, 0, stream>>>(n_rows, p.R, p.E, r, drb, dtable);
  } else {
    bias_rows_dr_kernel<kMaxRank><<<dr_blocks, 32 * kWarps, 0, stream>>>(n_rows, p.R, p.E, drb, table,
                                                                        dr_THR.data_as<__nv_bfloat16>());
    bias_rows_dtable_kernel<kMaxRank><<<dt_grid, kColThreads, 0, stream>>>(n_rows, p.R, p.E, r, drb, dtable);
  }
  QUILL_CUDA_CHECK_LAUNCH("bias_rows_backward kernels");
  add_partials_in_order(stream, dtable, dt_grid.y, static_cast<int64_t>(p.R) * p.E, dtable_RE.data_as<float>());
}

}  // namespace quill::cuda::attn_tc
