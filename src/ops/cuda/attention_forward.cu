// Inkling attention forward on the GPU: flash-style (online softmax over key tiles in shared memory;
// nothing of size T x T exists), with the relative bias computed inside the kernel from r and the table.
//
// Math (ops/attention.h), for query t of head h, kv head g = h / (H/G), allowed keys s
// (s <= t and, when window > 0, t - s < window):
//   bias(t, s)  = sum_i r[t, h, i] * table[i, t - s]   if t - s < E, else 0
//   tau(t)      = 1 + alpha * ln(max((t + 1) / n_floor, 1))  (log scaling on; else 1; fp64, rounded once)
//   score(t, s) = tau(t) * (scale * q[t, h] . k[s, g] + bias(t, s))
//   out[t, h]   = sum_s softmax_s(score) * v[s, g],   lse[h, t] = log sum_s exp(score(t, s))
// Shapes and dtypes: q_THd [T, H, d] bf16, k_TGd / v_TGd [T, G, d] bf16, r_THR [T, H, R] bf16,
// table_RE [R, E] fp32; out_THd [T, H, d] bf16, lse_HT [H, T] fp32 (both overwritten). All products,
// the softmax and the bias are fp32.
// Preconditions: every tensor on the GPU and contiguous, H % G == 0, 1 <= d <= 128, R <= 64; outputs do
// not alias inputs.
//
// Work split: one CTA (256 threads) per (64-query tile, head). It keeps the query tile, its r rows and
// the running max / sum / output accumulator (fp32, registers) and walks the key tiles from the first
// one inside the window to the diagonal. Per key tile: stage k, and the table columns of the tile's
// 127 distances; S = q k^T; add the bias; scale by tau; mask; online-softmax update; write P to shared
// memory; stage v in the same buffer; acc += P v. Costs O(T * window * d) work, O(T * H * d) memory.
// Shared memory at d = 128, R = 16: 2 * 64 * 129 + 64 * 65 + 64 * 17 + 16 * 128 floats = 95 KB.
// Measured on one H200 (T = 8192, H = 32, G = 8, d = 128, R = 16): 4.7 ms for a local layer
// (window 512), 31 ms for a global one (E = 1024); fp32 CUDA-core products, about 14 to 18 TFLOP/s.
#include "ops/cuda/attention_common.cuh"
#include "ops/cuda/attention_tc.h"
#include "ops/cuda/attention_wg.h"
#include "ops/cuda/attention_wg_internal.h"
#include "ops/cuda/kernels.h"

namespace quill::cuda {
namespace {

using namespace attn;

template <int DPAD>
size_t forward_smem_bytes(int R) {
  return sizeof(float) *
         (2 * head_tile_floats<DPAD>() + pair_tile_floats() + bias_rows_floats(R) + table_slice_floats(R));
}

template <int DPAD>
__global__ void __launch_bounds__(kThreads, 1)
    attention_forward_kernel(Problem p, const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k,
                             const __nv_bfloat16* __restrict__ v, const __nv_bfloat16* __restrict__ r,
                             const float* __restrict__ table, __nv_bfloat16* __restrict__ out,
                             float* __restrict__ lse) {
  constexpr int LDD = DPAD + 1;
  constexpr int CPT = DPAD / 16;  // output columns per thread
  extern __shared__ float smem[];
  float* q_s = smem;                                  // [64][LDD]  queries of this tile
  float* kv_s = q_s + head_tile_floats<DPAD>();       // [64][LDD]  keys, then values, of the key tile
  float* p_s = kv_s + head_tile_floats<DPAD>();       // [64][65]   P[query][key]
  float* r_s = p_s + pair_tile_floats();              // [64][R|1]  r rows of this tile
  float* tab_s = r_s + bias_rows_floats(p.R);         // [R][128]   table slice of the key tile

  const int tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
  const int n_qtiles = (p.T + kTile - 1) / kTile;
  const int t0 = (n_qtiles - 1 - static_cast<int>(blockIdx.x)) * kTile;  // longest rows first
  const int h = blockIdx.y;
  const int g = h / (p.H / p.G);
  const int t_last = min(t0 + kTile - 1, p.T - 1);
  const int64_t qrow_stride = static_cast<int64_t>(p.H) * p.d;
  const int64_t kvrow_stride = static_cast<int64_t>(p.G) * p.d;

  load_head_tile<DPAD>(q_s, q + static_cast<int64_t>(h) * p.d, t0, p.T, qrow_stride, p.d);
  load_bias_rows(r_s, r, p, t0, h);

  float tau[4], m[4], l[4], acc[4][CPT];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    tau[i] = tau_at(p, t0 + 4 * ty + i);
    m[i] = -INFINITY;
    l[i] = 0.0f;
#pragma unroll
    for (int j = 0; j < CPT; ++j) acc[i][j] = 0.0f;
  }

  const int s_first = p.window > 0 ? max(0, t0 - p.window + 1) : 0;
  for (int s0 = (s_first / kTile) * kTile; s0 <= t_last; s0 += kTile) {
    const int dmin = t0 - s0 - (kTile - 1);
    const bool has_bias = p.R > 0 && dmin < p.E;
    __syncthreads();  // the previous tile's readers of kv_s, p_s and tab_s are done
    load_head_tile<DPAD>(kv_s, k + static_cast<int64_t>(g) * p.d, s0, p.T, kvrow_stride, p.d);
    if (has_bias) load_table_slice(tab_s, table, p, dmin);
    __syncthreads();

    float sc[4][4] = {};
    micro_mma<4, LDD, 1, LDD, 1>(sc, q_s, kv_s, p.d, ty, tx);
    float bias[4][4] = {};
    if (has_bias) add_bias<true>(bias, r_s, tab_s, p.R, ty, tx);

#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int t = t0 + 4 * ty + i;
      float row_max = -INFINITY;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int s = s0 + tx + 16 * j;
        sc[i][j] = allowed(p, t, s) ? tau[i] * (p.scale * sc[i][j] + bias[i][j]) : -INFINITY;
        row_max = fmaxf(row_max, sc[i][j]);
      }
      // The 16 threads of a row are one half-warp: xor offsets below 16 stay inside it.
#pragma unroll
      for (int off = 8; off > 0; off >>= 1) row_max = fmaxf(row_max, __shfl_xor_sync(0xffffffffu, row_max, off));
      const float m_new = fmaxf(m[i], row_max);
      // A row with no allowed key so far keeps m = -inf; subtract 0 then, so exp gives 0, not NaN.
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;
      const float corr = expf(m[i] - m_use);
      l[i] *= corr;
#pragma unroll
      for (int j = 0; j < CPT; ++j) acc[i][j] *= corr;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float pr = expf(sc[i][j] - m_use);
        l[i] += pr;  // this thread's part of the row sum; the half-warp adds the parts at the end
        p_s[(4 * ty + i) * kPairLd + tx + 16 * j] = pr;
      }
      m[i] = m_new;
    }
    __syncthreads();  // P written, every reader of the keys done
    load_head_tile<DPAD>(kv_s, v + static_cast<int64_t>(g) * p.d, s0, p.T, kvrow_stride, p.d);
    __syncthreads();
    // acc[t][n] += sum_s P[t][s] * v[s][n]
    micro_mma<CPT, kPairLd, 1, 1, LDD>(acc, p_s, kv_s, kTile, ty, tx);
  }

#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float sum = l[i];
#pragma unroll
    for (int off = 8; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    const int t = t0 + 4 * ty + i;
    if (t >= p.T) continue;
    const float inv = 1.0f / sum;  // sum >= 1 term: key s = t is always allowed
    __nv_bfloat16* o_t = out + (static_cast<int64_t>(t) * p.H + h) * p.d;
#pragma unroll
    for (int j = 0; j < CPT; ++j) {
      const int n = tx + 16 * j;
      if (n < p.d) o_t[n] = __float2bfloat16(acc[i][j] * inv);
    }
    if (tx == 0) lse[static_cast<int64_t>(h) * p.T + t] = m[i] + logf(sum);
  }
}

template <int DPAD>
void launch_forward(const char* op, const Problem& p, cudaStream_t stream, const Tensor& q, const Tensor& k,
                    const Tensor& v, const Tensor& r, const Tensor& table, const Tensor& out, const Tensor& lse) {
  const size_t smem = forward_smem_bytes<DPAD>(p.R);
  set_smem(op, reinterpret_cast<const void*>(&attention_forward_kernel<DPAD>), smem);
  const dim3 grid((p.T + kTile - 1) / kTile, p.H);
  attention_forward_kernel<DPAD><<<grid, kThreads, smem, stream>>>(
      p, q.data_as<__nv_bfloat16>(), k.data_as<__nv_bfloat16>(), v.data_as<__nv_bfloat16>(),
      r.data_as<__nv_bfloat16>(), table.data_as<float>(), out.data_as<__nv_bfloat16>(), lse.data_as<float>());
  QUILL_CUDA_CHECK_LAUNCH("attention_forward_kernel");
}

}  // namespace

void attention_forward(const DeviceContext& ctx, const Tensor& q_THd, const Tensor& k_TGd, const Tensor& v_TGd,
                       const Tensor& r_THR, const Tensor& table_RE, const AttentionParams& params,
                       const Tensor& out_THd, const Tensor& lse_HT) {
  const char* op = "attention_forward";
  const Problem p = make_problem(op, q_THd, k_TGd, v_TGd, r_THR, table_RE, params);
  require_device(op, "out_THd", out_THd, {p.T, p.H, p.d}, DType::BF16);
  require_device(op, "lse_HT", lse_HT, {p.H, p.T}, DType::F32);
  if (p.T == 0 || p.H == 0) return;
  // Global layers on sm_90: the wgmma kernel, in the run's form (--attention-forward-form); local ones: mma.sync
  // (measured, attention_wg.h).
  if (attn_wg::takes(p)) {
    attn_wg::Options options;
    options.forward_form = ctx.cuda->attention_forward_form;
    return attn_wg::attention_forward_wgmma(ctx, q_THd, k_TGd, v_TGd, r_THR, table_RE, params, out_THd, lse_HT, options);
  }
  if (attn_tc::takes(p)) return attn_tc::forward(ctx, p, q_THd, k_TGd, v_TGd, r_THR, table_RE, out_THd, lse_HT);
  const cudaStream_t stream = stream_of(ctx);
  switch (head_dim_pad(p.d)) {
    case 16: return launch_forward<16>(op, p, stream, q_THd, k_TGd, v_TGd, r_THR, table_RE, out_THd, lse_HT);
    case 32: return launch_forward<32>(op, p, stream, q_THd, k_TGd, v_TGd, r_THR, table_RE, out_THd, lse_HT);
    case 64: return launch_forward<64>(op, p, stream, q_THd, k_TGd, v_TGd, r_THR, table_RE, out_THd, lse_HT);
    default: return launch_forward<128>(op, p, stream, q_THd, k_TGd, v_TGd, r_THR, table_RE, out_THd, lse_HT);
  }
}

namespace attn_wg {

void attention_forward_mma_sync(const DeviceContext& ctx, const Tensor& q_THd, const Tensor& k_TGd, const Tensor& v_TGd,
                                const Tensor& r_THR, const Tensor& table_RE, const AttentionParams& params,
                                const Tensor& out_THd, const Tensor& lse_HT) {
  const char* op = "attention_forward_mma_sync";
  const attn::Problem p = attn::make_problem(op, q_THd, k_TGd, v_TGd, r_THR, table_RE, params);
  attn::require_device(op, "out_THd", out_THd, {p.T, p.H, p.d}, DType::BF16);
  attn::require_device(op, "lse_HT", lse_HT, {p.H, p.T}, DType::F32);
  QUILL_CHECK(p.d == 128, "{}: head dim {} is not supported (the mma.sync path is for head dim 128)", op, p.d);
  if (p.T == 0 || p.H == 0) return;
  attn_tc::forward(ctx, p, q_THd, k_TGd, v_TGd, r_THR, table_RE, out_THd, lse_HT);
}

}  // namespace attn_wg
}  // namespace quill::cuda
