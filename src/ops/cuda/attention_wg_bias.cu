// The banded bias of the Hopper attention forward (layout: attention_wg_layout.h): for every pair
// (t, s = t - u) that owns a band slot, band[slot] = sum_i r[t, h, i] * table[i, u] when 0 <= u < E and
// t < T, else 0. A thread keeps one table column u in registers (like attention_tc_bias.cu's rows
// kernel) and walks 64 positions t whose r rows are staged in shared memory; for a fixed t the warp's
// 32 consecutive u are 32 consecutive keys of one key block, so the stores are contiguous.
// All arithmetic fp32 (the bias rows of the tensor-core path, rounded the same way).
#include "ops/cuda/attention_wg_internal.h"

namespace quill::cuda::attn_wg {
namespace {

constexpr int kUThreads = 128;  // distances per CTA
constexpr int kTRows = 64;      // positions per CTA

template <int RMAX>
__global__ void __launch_bounds__(kUThreads)
    bias_band_kernel(int T, int H, int R, int E, const __nv_bfloat16* __restrict__ r, const float* __restrict__ table,
                     float* __restrict__ band) {
  __shared__ float r_s[kTRows][RMAX];
  const int u = static_cast<int>(band_u_first()) + static_cast<int>(blockIdx.x) * kUThreads + static_cast<int>(threadIdx.x);
  const int t_first = static_cast<int>(blockIdx.y) * kTRows;
  const int h = blockIdx.z;
  for (int idx = threadIdx.x; idx < kTRows * R; idx += kUThreads) {
    const int rr = idx / R, i = idx % R, t = t_first + rr;
    r_s[rr][i] = t < T ? __bfloat162float(r[(static_cast<int64_t>(t) * H + h) * R + i]) : 0.0f;
  }
  __syncthreads();
  if (u >= band_u_first() + band_u_count(E)) return;
  const bool u_in = u >= 0 && u < E;
  float tab[RMAX];
#pragma unroll
  for (int i = 0; i < RMAX; ++i) tab[i] = (u_in && i < R) ? table[static_cast<int64_t>(i) * E + u] : 0.0f;
  const int t_end = min(t_first + kTRows, static_cast<int>(band_t_extent(T, E)));
  for (int t = t_first; t < t_end; ++t) {
    const int64_t slot = band_slot(T, E, h, t, t - u);
    if (slot < 0) continue;
    float acc = 0.0f;
#pragma unroll
    for (int i = 0; i < RMAX; ++i)
      if (i < R) acc = fmaf(r_s[t - t_first][i], tab[i], acc);
    band[slot] = acc;
  }
}

}  // namespace

void write_bias_band(const DeviceContext& ctx, const attn::Problem& p, const Tensor& r_THR, const Tensor& table_RE,
                     const Tensor& band) {
  QUILL_CHECK(band.numel() == band_floats(p.T, p.H, p.E), "write_bias_band: band has {} floats, the layout needs {}",
              band.numel(), band_floats(p.T, p.H, p.E));
  const dim3 grid(static_cast<unsigned>((band_u_count(p.E) + kUThreads - 1) / kUThreads),
                  static_cast<unsigned>((band_t_extent(p.T, p.E) + kTRows - 1) / kTRows), static_cast<unsigned>(p.H));
  QUILL_CHECK(grid.y <= 65535 && grid.z <= 65535, "write_bias_band: T={} E={} H={} exceed the grid limits", p.T, p.E,
              p.H);
  const auto* r = r_THR.data_as<__nv_bfloat16>();
  const auto* table = table_RE.data_as<float>();
  float* out = band.data_as<float>();
  const cudaStream_t stream = stream_of(ctx);
  if (p.R <= 16)
    bias_band_kernel<16><<<grid, kUThreads, 0, stream>>>(p.T, p.H, p.R, p.E, r, table, out);
  else
    bias_band_kernel<64><<<grid, kUThreads, 0, stream>>>(p.T, p.H, p.R, p.E, r, table, out);
  QUILL_CUDA_CHECK_LAUNCH("bias_band_kernel");
}

}  // namespace quill::cuda::attn_wg
