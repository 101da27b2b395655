// Attention forward on tensor cores for head dim 128 (the math: ops/attention.h; the fragment
// layouts: attention_tc.cuh). Flash-attention-2 style: one CTA of 4 warps per (64-query tile, head);
// each warp owns 16 query rows, keeps its Q fragments, running max / sum and the 16 x 128 output
// accumulator in registers, and walks the 64-key tiles from the first inside the window to the
// diagonal. Per key tile: S = Q K^T on mma.sync (bf16 in, fp32 out), then in fp32 the bias
// rb[t, h, t - s] (staged per tile pair in shared memory), tau, the mask and the online softmax in
// base 2; P is rounded to bf16 in registers and O += P V. K and V tiles arrive by cp.async, V's
// load overlapping S and the next K's (with the tile pair's bias, attention_tc.cuh) overlapping P V.
// Shared memory: Q, K, V tiles and the bias tile, 65 KiB.
#include "ops/cuda/attention_tc.cuh"
#include "ops/cuda/attention_tc.h"

namespace quill::cuda::attn_tc {
namespace {

constexpr int kThreads = 128;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

__global__ void __launch_bounds__(kThreads)
    attention_tc_forward_kernel(TcProblem p, const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k,
                                const __nv_bfloat16* __restrict__ v, __nv_bfloat16* __restrict__ out,
                                float* __restrict__ lse) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  __nv_bfloat16* q_s = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  __nv_bfloat16* k_s = q_s + kTileElems;
  __nv_bfloat16* v_s = k_s + kTileElems;
  float* rb_s = reinterpret_cast<float*>(v_s + kTileElems);  // the bias of the current tile pair

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, c = lane & 3;
  const int n_qtiles = (p.T + kRows - 1) / kRows;
  const int t0 = (n_qtiles - 1 - static_cast<int>(blockIdx.x)) * kRows;  // longest rows first
  const int h = blockIdx.y;
  const int kvh = h / (p.H / p.G);
  const int64_t q_stride = static_cast<int64_t>(p.H) * kD, kv_stride = static_cast<int64_t>(p.G) * kD;
  const __nv_bfloat16* k_src = k + static_cast<int64_t>(kvh) * kD;
  const __nv_bfloat16* v_src = v + static_cast<int64_t>(kvh) * kD;

  const int s_first = p.window > 0 ? max(0, t0 - p.window + 1) : 0;
  const int s_begin = (s_first / kRows) * kRows;
  const int t_last = min(t0 + kRows - 1, p.T - 1);

  load_tile_async(q_s, q + static_cast<int64_t>(h) * kD, t0, p.T, q_stride, tid, kThreads);
  load_tile_async(k_s, k_src, s_begin, p.T, kv_stride, tid, kThreads);
  // A key tile needs bias rows when its smallest distance t0 - (s0 + 63) is below E.
  auto tile_has_bias = [&](int s0) { return p.rb != nullptr && t0 - (s0 + kRows - 1) < p.E; };
  if (tile_has_bias(s_begin)) load_bias_tile_async(rb_s, p, h, t0, s_begin, tid, kThreads);
  cp_async_commit();

  // This thread's two query rows: t_row[0] = t0 + 16 warp + g, t_row[1] = t_row[0] + 8. The score in
  // base 2 is coef_qk * (q . k) + coef_bias * bias, with tau, scale and log2(e) folded in.
  int t_row[2];
  float coef_qk[2], coef_bias[2], m[2], l[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    t_row[i] = t0 + 16 * warp + g + 8 * i;
    const float tau = (p.tau != nullptr && t_row[i] < p.T) ? p.tau[t_row[i]] : 1.0f;
    coef_qk[i] = tau * p.scale * kLog2e;
    coef_bias[i] = tau * kLog2e;
    m[i] = -INFINITY;
    l[i] = 0.0f;
  }
  float o[16][4];
#pragma unroll
  for (int j = 0; j < 16; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;

  cp_async_wait_all();
  __syncthreads();
  uint32_t qf[8][4];
#pragma unroll
  for (int kk = 0; kk < 8; ++kk) load_a(qf[kk], q_s, 16 * warp, kk, lane);

  for (int s0 = s_begin; s0 <= t_last; s0 += kRows) {
    cp_async_wait_all();  // K of this tile
    __syncthreads();      // ... visible to all; every warp is done with the previous V
    load_tile_async(v_s, v_src, s0, p.T, kv_stride, tid, kThreads);
    cp_async_commit();

    float sc[8][4];
#pragma unroll
    for (int j = 0; j < 8; ++j) sc[j][0] = sc[j][1] = sc[j][2] = sc[j][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < 8; ++kk) mma_kstep_by_rows_n(sc, qf[kk], k_s, kk, lane);  // S = Q K^T

    const bool full = tile_fully_allowed(p, t0, s0);
    const bool has_bias = tile_has_bias(s0);
    float row_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < 8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = e >> 1;
        const int t = t_row[i], s = s0 + 8 * j + 2 * c + (e & 1);
        const bool ok = full || tc_allowed(p, t, s);
        const float bias = has_bias ? rb_s[bias_at(16 * warp + g + 8 * i, 8 * j + 2 * c + (e & 1))] : 0.0f;
        const float x = ok ? fmaf(coef_qk[i], sc[j][e], coef_bias[i] * bias) : -INFINITY;
        sc[j][e] = x;
        row_max[i] = fmaxf(row_max[i], x);
      }
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      // The 4 threads of a row are lanes 4g .. 4g+3.
      row_max[i] = fmaxf(row_max[i], __shfl_xor_sync(0xffffffffu, row_max[i], 1));
      row_max[i] = fmaxf(row_max[i], __shfl_xor_sync(0xffffffffu, row_max[i], 2));
      const float m_new = fmaxf(m[i], row_max[i]);
      // A row with nothing allowed so far keeps m = -inf; subtract 0 then, so exp2 gives 0, not NaN.
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;
      const float corr = fast_exp2(m[i] - m_use);
      l[i] *= corr;
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        o[j][2 * i] *= corr;
        o[j][2 * i + 1] *= corr;
      }
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float p0 = fast_exp2(sc[j][2 * i] - m_use), p1 = fast_exp2(sc[j][2 * i + 1] - m_use);
        sc[j][2 * i] = p0;
        sc[j][2 * i + 1] = p1;
        l[i] += p0 + p1;  // this thread's part of the row sum; the 4 parts are added at the end
      }
      m[i] = m_new;
    }

    cp_async_wait_all();  // V of this tile
    __syncthreads();      // ... visible to all; every warp is done with K and the bias tile
    if (s0 + kRows <= t_last) {
      load_tile_async(k_s, k_src, s0 + kRows, p.T, kv_stride, tid, kThreads);
      if (tile_has_bias(s0 + kRows)) load_bias_tile_async(rb_s, p, h, t0, s0 + kRows, tid, kThreads);
      cp_async_commit();
    }
    mma_acc_by_rows_k(o, sc, v_s, lane);  // O += P V
  }

#pragma unroll
  for (int i = 0; i < 2; ++i) {
    float sum = l[i];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const int t = t_row[i];
    if (t >= p.T) continue;
    const float inv = 1.0f / sum;  // sum >= 1 term: key s = t is always allowed
    __nv_bfloat16* o_t = out + (static_cast<int64_t>(t) * p.H + h) * kD;
#pragma unroll
    for (int j = 0; j < 16; ++j)
      *reinterpret_cast<__nv_bfloat162*>(o_t + 8 * j + 2 * c) =
          __floats2bfloat162_rn(o[j][2 * i] * inv, o[j][2 * i + 1] * inv);
    if (c == 0) lse[static_cast<int64_t>(h) * p.T + t] = (m[i] + log2f(sum)) * kLn2;
  }
}

}  // namespace

void forward(const DeviceContext& ctx, const attn::Problem& p, const Tensor& q_THd, const Tensor& k_TGd,
             const Tensor& v_TGd, const Tensor& r_THR, const Tensor& table_RE, const Tensor& out_THd,
             const Tensor& lse_HT) {
  Tensor rb, tau;
  TcProblem tp{p.T, p.H, p.G, p.E, p.window, p.scale, nullptr, nullptr};
  if (p.R > 0 && p.E > 0) {
    rb = Tensor::empty({p.T, p.H, p.E}, DType::F32, *ctx.allocator);
    bias_rows(ctx, p, r_THR, table_RE, rb, bias_rows_path(ctx));
    tp.rb = rb.data_as<float>();
  }
  if (p.log_scaling) {
    tau = Tensor::empty({p.T}, DType::F32, *ctx.allocator);
    tau_rows(ctx, p, tau);
    tp.tau = tau.data_as<float>();
  }
  constexpr size_t smem = 3 * kTileElems * sizeof(__nv_bfloat16) + kRbTileFloats * sizeof(float);
  attn::set_smem("attention_forward", reinterpret_cast<const void*>(&attention_tc_forward_kernel), smem);
  const dim3 grid((p.T + kRows - 1) / kRows, p.H);
  attention_tc_forward_kernel<<<grid, kThreads, smem, stream_of(ctx)>>>(
      tp, q_THd.data_as<__nv_bfloat16>(), k_TGd.data_as<__nv_bfloat16>(), v_TGd.data_as<__nv_bfloat16>(),
      out_THd.data_as<__nv_bfloat16>(), lse_HT.data_as<float>());
  QUILL_CUDA_CHECK_LAUNCH("attention_tc_forward_kernel");
}

}  // namespace quill::cuda::attn_tc
