// Inkling attention backward on the GPU, flash style: P is recomputed from the saved lse tile by
// tile, nothing of size T x T exists.
//
// Math (ops/attention.h; forward in attention_forward.cu), for query t of head h, kv head
// g = h / (H/G), allowed key s, distance t - s:
//   P    = exp(score(t, s) - lse[h, t]),   dP = dout[t, h] . v[s, g],   D_t = dout[t, h] . out[t, h]
//   dz   = tau(t) * P * (dP - D_t)                     (the gradient of the pre-tau score)
//   dv[s, g]          += P * dout[t, h]
//   dq[t, h]          += scale * dz * k[s, g]
//   dk[s, g]          += scale * dz * q[t, h]
//   dr[t, h, i]       += dz * table[i, t - s]          (t - s < E)
//   dtable[i, t - s]  += dz * r[t, h, i]               (t - s < E)
// Shapes and dtypes: q_THd, out_THd, dout_THd [T, H, d] bf16; k_TGd, v_TGd [T, G, d] bf16; r_THR
// [T, H, R] bf16; table_RE [R, E] fp32; lse_HT [H, T] fp32. dq_THd, dk_TGd, dv_TGd, dr_THR (bf16) are
// overwritten; dtable_RE (fp32) is accumulated into. All arithmetic is fp32.
// Preconditions: as the forward; lse_HT and out_THd are the forward's for these inputs; outputs
// do not alias inputs or each other.
//
// Kernels on the context's stream, no atomics (issue 24: the same bits on every run):
//  1. D[h, t] = dout[t, h] . out[t, h] into an fp32 workspace [H, T] (one warp per row).
//  2. dq kernel: one CTA per (64-query tile, head), walking key tiles like the forward. It recomputes
//     S and dP, forms dz in shared memory, and accumulates dq in registers, written once in bf16.
//     With a bias it stores each allowed pair's dz at distance t - s < E into drb [T, H, E] (fp32,
//     one writer per element), from which the tensor-core path's bias backward (attention_tc_bias.cu)
//     forms dr and dtable in a fixed order. (Before: dr summed here, dtable by fp32 atomics per
//     tile, whose order varied from run to run.)
//  3. dk/dv kernel: one CTA per (64-key tile, kv head), walking the query heads of its group and the
//     query tiles that see its keys (up to window - 1 positions later, or to T); recomputes S^T and
//     dP^T, and accumulates dk and dv in registers, written once in bf16.
// Kernels 2 and 3 both recompute S and dP (7 tile products per tile pair instead of 5): the price of
// deterministic dq, dk, dv, dr without fp32 workspaces.
// Shared memory at d = 128, R = 16: dq kernel 4 * 64 * 129 + 64 * 65 + 64 * 17 + 16 * 128 + 16 * 64
// floats = 165 KB; dk/dv kernel 4 * 64 * 129 + 2 * 64 * 65 + 64 * 17 + 16 * 128 + 3 * 64 floats
// = 179 KB (one CTA per multiprocessor).
// Measured on one H200 (T = 8192, H = 32, G = 8, d = 128, R = 16): 17.6 ms for a local layer
// (window 512), 103 ms for a global one (E = 1024); fp32 CUDA-core products, about 9 to 13 TFLOP/s.
#include "ops/cuda/attention_common.cuh"
#include "ops/cuda/attention_tc.h"
#include "ops/cuda/attention_wg.h"
#include "ops/cuda/attention_wg_internal.h"
#include "ops/cuda/kernels.h"

namespace quill::cuda {
namespace {

using namespace attn;

// D[h, t] = sum_n dout[t, h, n] * out[t, h, n]; one warp per (t, h).
__global__ void attention_backward_dot_kernel(int T, int H, int d, const __nv_bfloat16* __restrict__ dout,
                                              const __nv_bfloat16* __restrict__ out, float* __restrict__ D) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= static_cast<int64_t>(T) * H) return;
  const __nv_bfloat16* a = dout + row * d;
  const __nv_bfloat16* b = out + row * d;
  float sum = 0.0f;
  for (int n = lane; n < d; n += 32) sum = fmaf(__bfloat162float(a[n]), __bfloat162float(b[n]), sum);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  if (lane == 0) {
    const int t = static_cast<int>(row / H), h = static_cast<int>(row % H);
    D[static_cast<int64_t>(h) * T + t] = sum;
  }
}

template <int DPAD>
size_t dq_smem_bytes(int R) {
  return sizeof(float) * (4 * head_tile_floats<DPAD>() + pair_tile_floats() + bias_rows_floats(R) +
                          table_slice_floats(R));
}

template <int DPAD>
size_t dkv_smem_bytes(int R) {
  return sizeof(float) * (4 * head_tile_floats<DPAD>() + 2 * pair_tile_floats() + bias_rows_floats(R) +
                          table_slice_floats(R) + 3 * kTile);
}

// dq, and drb (the bias rows' gradient). Rows of the thread's pairs are queries (4ty + i), columns keys (tx + 16j).
template <int DPAD>
__global__ void __launch_bounds__(kThreads, 1)
    attention_backward_dq_kernel(Problem p, const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k,
                                 const __nv_bfloat16* __restrict__ v, const __nv_bfloat16* __restrict__ r,
                                 const float* __restrict__ table, const __nv_bfloat16* __restrict__ dout,
                                 const float* __restrict__ lse, const float* __restrict__ D,
                                 __nv_bfloat16* __restrict__ dq, float* __restrict__ drb) {
  constexpr int LDD = DPAD + 1;
  constexpr int CPT = DPAD / 16;
  extern __shared__ float smem[];
  float* q_s = smem;                                // [64][LDD]  queries
  float* do_s = q_s + head_tile_floats<DPAD>();     // [64][LDD]  dout rows of the queries
  float* k_s = do_s + head_tile_floats<DPAD>();     // [64][LDD]  keys of the key tile
  float* v_s = k_s + head_tile_floats<DPAD>();      // [64][LDD]  values of the key tile
  float* dz_s = v_s + head_tile_floats<DPAD>();     // [64][65]   dz[query][key]
  float* r_s = dz_s + pair_tile_floats();           // [64][R|1]  r rows of the queries
  float* tab_s = r_s + bias_rows_floats(p.R);       // [R][128]   table slice of the key tile

  const int tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
  const int n_qtiles = (p.T + kTile - 1) / kTile;
  const int t0 = (n_qtiles - 1 - static_cast<int>(blockIdx.x)) * kTile;  // longest rows first
  const int h = blockIdx.y;
  const int g = h / (p.H / p.G);
  const int t_last = min(t0 + kTile - 1, p.T - 1);
  const int64_t qrow_stride = static_cast<int64_t>(p.H) * p.d;
  const int64_t kvrow_stride = static_cast<int64_t>(p.G) * p.d;

  load_head_tile<DPAD>(q_s, q + static_cast<int64_t>(h) * p.d, t0, p.T, qrow_stride, p.d);
  load_head_tile<DPAD>(do_s, dout + static_cast<int64_t>(h) * p.d, t0, p.T, qrow_stride, p.d);
  load_bias_rows(r_s, r, p, t0, h);

  float tau[4], row_lse[4], row_D[4], qacc[4][CPT];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int t = t0 + 4 * ty + i;
    tau[i] = tau_at(p, t);
    row_lse[i] = t < p.T ? lse[static_cast<int64_t>(h) * p.T + t] : 0.0f;
    row_D[i] = t < p.T ? D[static_cast<int64_t>(h) * p.T + t] : 0.0f;
#pragma unroll
    for (int j = 0; j < CPT; ++j) qacc[i][j] = 0.0f;
  }

  const int s_first = p.window > 0 ? max(0, t0 - p.window + 1) : 0;
  for (int s0 = (s_first / kTile) * kTile; s0 <= t_last; s0 += kTile) {
    const int dmin = t0 - s0 - (kTile - 1);
    const bool has_bias = p.R > 0 && dmin < p.E;
    __syncthreads();  // the previous tile's readers of k_s, v_s, dz_s and tab_s are done
    load_head_tile<DPAD>(k_s, k + static_cast<int64_t>(g) * p.d, s0, p.T, kvrow_stride, p.d);
    load_head_tile<DPAD>(v_s, v + static_cast<int64_t>(g) * p.d, s0, p.T, kvrow_stride, p.d);
    if (has_bias) load_table_slice(tab_s, table, p, dmin);
    __syncthreads();

    float sc[4][4] = {}, dp[4][4] = {};
    micro_mma<4, LDD, 1, LDD, 1>(sc, q_s, k_s, p.d, ty, tx);   // q . k
    micro_mma<4, LDD, 1, LDD, 1>(dp, do_s, v_s, p.d, ty, tx);  // dout . v
    float bias[4][4] = {};
    if (has_bias) add_bias<true>(bias, r_s, tab_s, p.R, ty, tx);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int t = t0 + 4 * ty + i;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int s = s0 + tx + 16 * j;
        float dz = 0.0f;
        if (allowed(p, t, s)) {
          const float P = expf(tau[i] * (p.scale * sc[i][j] + bias[i][j]) - row_lse[i]);
          dz = tau[i] * (P * (dp[i][j] - row_D[i]));
          if (has_bias && t - s < p.E) drb[(static_cast<int64_t>(t) * p.H + h) * p.E + (t - s)] = dz;
        }
        dz_s[(4 * ty + i) * kPairLd + tx + 16 * j] = dz;
      }
    }
    __syncthreads();  // dz complete

    // dq[t][n] += sum_s dz[t][s] * k[s][n]   (scale applied once, at the end)
    micro_mma<CPT, kPairLd, 1, 1, LDD>(qacc, dz_s, k_s, kTile, ty, tx);
  }

#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int t = t0 + 4 * ty + i;
    if (t >= p.T) continue;
    __nv_bfloat16* dq_t = dq + (static_cast<int64_t>(t) * p.H + h) * p.d;
#pragma unroll
    for (int j = 0; j < CPT; ++j) {
      const int n = tx + 16 * j;
      if (n < p.d) dq_t[n] = __float2bfloat16(p.scale * qacc[i][j]);
    }
  }
}

// dk and dv. Rows of the thread's pairs are keys (4ty + i), columns queries (tx + 16j).
template <int DPAD>
__global__ void __launch_bounds__(kThreads, 1)
    attention_backward_dkv_kernel(Problem p, const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k,
                                  const __nv_bfloat16* __restrict__ v, const __nv_bfloat16* __restrict__ r,
                                  const float* __restrict__ table, const __nv_bfloat16* __restrict__ dout,
                                  const float* __restrict__ lse, const float* __restrict__ D,
                                  __nv_bfloat16* __restrict__ dk, __nv_bfloat16* __restrict__ dv) {
  constexpr int LDD = DPAD + 1;
  constexpr int CPT = DPAD / 16;
  extern __shared__ float smem[];
  float* k_s = smem;                                // [64][LDD]  keys of this tile
  float* v_s = k_s + head_tile_floats<DPAD>();      // [64][LDD]  values of this tile
  float* q_s = v_s + head_tile_floats<DPAD>();      // [64][LDD]  queries of the query tile
  float* do_s = q_s + head_tile_floats<DPAD>();     // [64][LDD]  dout rows of the queries
  float* p_s = do_s + head_tile_floats<DPAD>();     // [64][65]   P[query][key]
  float* dz_s = p_s + pair_tile_floats();           // [64][65]   dz[query][key]
  float* r_s = dz_s + pair_tile_floats();           // [64][R|1]  r rows of the queries
  float* tab_s = r_s + bias_rows_floats(p.R);       // [R][128]   table slice of the tile pair
  float* lse_s = tab_s + table_slice_floats(p.R);   // [64]       per query: lse, D, tau
  float* D_s = lse_s + kTile;
  float* tau_s = D_s + kTile;

  const int tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
  const int s0 = static_cast<int>(blockIdx.x) * kTile;  // low key tiles see the most queries: first
  const int g = blockIdx.y;
  const int rep = p.H / p.G;
  const int s_last = min(s0 + kTile - 1, p.T - 1);
  const int t_end = p.window > 0 ? min(p.T - 1, s_last + p.window - 1) : p.T - 1;  // last query that sees a key
  const int64_t qrow_stride = static_cast<int64_t>(p.H) * p.d;
  const int64_t kvrow_stride = static_cast<int64_t>(p.G) * p.d;

  load_head_tile<DPAD>(k_s, k + static_cast<int64_t>(g) * p.d, s0, p.T, kvrow_stride, p.d);
  load_head_tile<DPAD>(v_s, v + static_cast<int64_t>(g) * p.d, s0, p.T, kvrow_stride, p.d);

  float kacc[4][CPT], vacc[4][CPT];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < CPT; ++j) kacc[i][j] = vacc[i][j] = 0.0f;

  for (int h = g * rep; h < (g + 1) * rep; ++h) {
    for (int t0 = s0; t0 <= t_end; t0 += kTile) {
      const int dmin = t0 - s0 - (kTile - 1);
      const bool has_bias = p.R > 0 && dmin < p.E;
      __syncthreads();  // the previous tile's readers of q_s, do_s, p_s, dz_s, r_s, tab_s are done
      load_head_tile<DPAD>(q_s, q + static_cast<int64_t>(h) * p.d, t0, p.T, qrow_stride, p.d);
      load_head_tile<DPAD>(do_s, dout + static_cast<int64_t>(h) * p.d, t0, p.T, qrow_stride, p.d);
      if (has_bias) {
        load_bias_rows(r_s, r, p, t0, h);
        load_table_slice(tab_s, table, p, dmin);
      }
      if (tid < kTile) {
        const int t = t0 + tid;
        const bool in = t < p.T;
        lse_s[tid] = in ? lse[static_cast<int64_t>(h) * p.T + t] : 0.0f;
        D_s[tid] = in ? D[static_cast<int64_t>(h) * p.T + t] : 0.0f;
        tau_s[tid] = tau_at(p, t);
      }
      __syncthreads();

      float sc[4][4] = {}, dp[4][4] = {};
      micro_mma<4, LDD, 1, LDD, 1>(sc, k_s, q_s, p.d, ty, tx);   // k . q
      micro_mma<4, LDD, 1, LDD, 1>(dp, v_s, do_s, p.d, ty, tx);  // v . dout
      float bias[4][4] = {};
      if (has_bias) add_bias<false>(bias, r_s, tab_s, p.R, ty, tx);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int c = 4 * ty + i, s = s0 + c;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int rr = tx + 16 * j, t = t0 + rr;
          float P = 0.0f, dz = 0.0f;
          if (allowed(p, t, s)) {
            const float tau = tau_s[rr];
            P = expf(tau * (p.scale * sc[i][j] + bias[i][j]) - lse_s[rr]);
            dz = tau * (P * (dp[i][j] - D_s[rr]));
          }
          p_s[rr * kPairLd + c] = P;
          dz_s[rr * kPairLd + c] = dz;
        }
      }
      __syncthreads();  // P and dz complete

      // dv[s][n] += sum_t P[t][s] * dout[t][n];  dk[s][n] += sum_t dz[t][s] * q[t][n]
      micro_mma<CPT, 1, kPairLd, 1, LDD>(vacc, p_s, do_s, kTile, ty, tx);
      micro_mma<CPT, 1, kPairLd, 1, LDD>(kacc, dz_s, q_s, kTile, ty, tx);
    }
  }

#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int s = s0 + 4 * ty + i;
    if (s >= p.T) continue;
    const int64_t base = (static_cast<int64_t>(s) * p.G + g) * p.d;
#pragma unroll
    for (int j = 0; j < CPT; ++j) {
      const int n = tx + 16 * j;
      if (n < p.d) {
        dk[base + n] = __float2bfloat16(p.scale * kacc[i][j]);
        dv[base + n] = __float2bfloat16(vacc[i][j]);
      }
    }
  }
}

template <int DPAD>
void launch_backward(const char* op, const DeviceContext& ctx, const Problem& p, const Tensor& q, const Tensor& k,
                     const Tensor& v, const Tensor& r, const Tensor& table, const Tensor& dout, const Tensor& lse,
                     const Tensor& D, const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dr,
                     const Tensor& dtable) {
  using bf16 = __nv_bfloat16;
  const cudaStream_t stream = stream_of(ctx);
  // drb [T, H, E]: the dq kernel stores every allowed pair's entry (u <= t, u < window); zero the rest.
  Tensor drb;
  if (p.R > 0 && p.E > 0) {
    drb = Tensor::empty({p.T, p.H, p.E}, DType::F32, *ctx.allocator);
    const bool window_below_E = p.window > 0 && p.window < p.E;
    const int64_t zero_rows = window_below_E ? p.T : std::min<int64_t>(p.T, p.E);
    QUILL_CUDA_CHECK(cudaMemsetAsync(drb.data(), 0, zero_rows * p.H * p.E * sizeof(float), stream));
  }
  const int n_tiles = (p.T + kTile - 1) / kTile;
  const size_t dq_smem = dq_smem_bytes<DPAD>(p.R);
  set_smem(op, reinterpret_cast<const void*>(&attention_backward_dq_kernel<DPAD>), dq_smem);
  attention_backward_dq_kernel<DPAD><<<dim3(n_tiles, p.H), kThreads, dq_smem, stream>>>(
      p, q.data_as<bf16>(), k.data_as<bf16>(), v.data_as<bf16>(), r.data_as<bf16>(), table.data_as<float>(),
      dout.data_as<bf16>(), lse.data_as<float>(), D.data_as<float>(), dq.data_as<bf16>(),
      drb.defined() ? drb.data_as<float>() : nullptr);
  QUILL_CUDA_CHECK_LAUNCH("attention_backward_dq_kernel");
  const size_t dkv_smem = dkv_smem_bytes<DPAD>(p.R);
  set_smem(op, reinterpret_cast<const void*>(&attention_backward_dkv_kernel<DPAD>), dkv_smem);
  attention_backward_dkv_kernel<DPAD><<<dim3(n_tiles, p.G), kThreads, dkv_smem, stream>>>(
      p, q.data_as<bf16>(), k.data_as<bf16>(), v.data_as<bf16>(), r.data_as<bf16>(), table.data_as<float>(),
      dout.data_as<bf16>(), lse.data_as<float>(), D.data_as<float>(), dk.data_as<bf16>(), dv.data_as<bf16>());
  QUILL_CUDA_CHECK_LAUNCH("attention_backward_dkv_kernel");
  // dr = drb . table^T and dtable += r^T . drb, in a fixed order; with no distance biased, dr = 0.
  if (p.R > 0) attn_tc::bias_rows_backward(ctx, p, r, table, drb, dr, dtable, attn_tc::bias_rows_path(ctx));
}

}  // namespace

namespace attn {

Problem check_backward(const char* op, const Tensor& q_THd, const Tensor& k_TGd, const Tensor& v_TGd,
                       const Tensor& r_THR, const Tensor& table_RE, const AttentionParams& params,
                       const Tensor& out_THd, const Tensor& lse_HT, const Tensor& dout_THd, const Tensor& dq_THd,
                       const Tensor& dk_TGd, const Tensor& dv_TGd, const Tensor& dr_THR, const Tensor& dtable_RE) {
  const Problem p = make_problem(op, q_THd, k_TGd, v_TGd, r_THR, table_RE, params);
  require_device(op, "out_THd", out_THd, {p.T, p.H, p.d}, DType::BF16);
  require_device(op, "lse_HT", lse_HT, {p.H, p.T}, DType::F32);
  require_device(op, "dout_THd", dout_THd, {p.T, p.H, p.d}, DType::BF16);
  require_device(op, "dq_THd", dq_THd, {p.T, p.H, p.d}, DType::BF16);
  require_device(op, "dk_TGd", dk_TGd, {p.T, p.G, p.d}, DType::BF16);
  require_device(op, "dv_TGd", dv_TGd, {p.T, p.G, p.d}, DType::BF16);
  require_device(op, "dr_THR", dr_THR, {p.T, p.H, p.R}, DType::BF16);
  if (dtable_RE.defined()) require_device(op, "dtable_RE", dtable_RE, {p.R, p.E}, DType::F32);  // else not wanted
  return p;
}

Tensor output_gradient_dots(const DeviceContext& ctx, const Problem& p, const Tensor& dout_THd, const Tensor& out_THd) {
  // The workspace is freed by the caller in stream order (the device allocator's frees are stream-ordered).
  Tensor D = Tensor::empty({p.H, p.T}, DType::F32, *ctx.allocator);
  constexpr int kDotWarps = 8;
  const int64_t rows = static_cast<int64_t>(p.T) * p.H;
  attention_backward_dot_kernel<<<static_cast<unsigned>((rows + kDotWarps - 1) / kDotWarps), 32 * kDotWarps, 0,
                                  stream_of(ctx)>>>(p.T, p.H, p.d, dout_THd.data_as<__nv_bfloat16>(),
                                                    out_THd.data_as<__nv_bfloat16>(), D.data_as<float>());
  QUILL_CUDA_CHECK_LAUNCH("attention_backward_dot_kernel");
  return D;
}

}  // namespace attn

void attention_backward(const DeviceContext& ctx, const Tensor& q_THd, const Tensor& k_TGd, const Tensor& v_TGd,
                        const Tensor& r_THR, const Tensor& table_RE, const AttentionParams& params,
                        const Tensor& out_THd, const Tensor& lse_HT, const Tensor& dout_THd, const Tensor& dq_THd,
                        const Tensor& dk_TGd, const Tensor& dv_TGd, const Tensor& dr_THR, const Tensor& dtable_RE) {
  const char* op = "attention_backward";
  const Problem p = check_backward(op, q_THd, k_TGd, v_TGd, r_THR, table_RE, params, out_THd, lse_HT, dout_THd,
                                   dq_THd, dk_TGd, dv_TGd, dr_THR, dtable_RE);
  if (p.T == 0 || p.H == 0) return;
  // D[h, t] = dout . out, fp32.
  const Tensor D = output_gradient_dots(ctx, p, dout_THd, out_THd);
  if (attn_tc::takes(p)) {
    if (attn_wg::takes(p)) {  // global layers on sm_90 (measured, attention_wg.h), in the run's form
      attn_wg::Options options;
      options.backward_form = ctx.cuda->attention_backward_form;
      return attn_wg::backward(ctx, p, q_THd, k_TGd, v_TGd, r_THR, table_RE, lse_HT, D, dout_THd, dq_THd, dk_TGd,
                               dv_TGd, dr_THR, dtable_RE, options);
    }
    return attn_tc::backward(ctx, p, q_THd, k_TGd, v_TGd, r_THR, table_RE, lse_HT, D, dout_THd, dq_THd, dk_TGd,
                             dv_TGd, dr_THR, dtable_RE);
  }

  switch (head_dim_pad(p.d)) {
    case 16: return launch_backward<16>(op, ctx, p, q_THd, k_TGd, v_TGd, r_THR, table_RE, dout_THd, lse_HT, D, dq_THd, dk_TGd, dv_TGd, dr_THR, dtable_RE);
    case 32: return launch_backward<32>(op, ctx, p, q_THd, k_TGd, v_TGd, r_THR, table_RE, dout_THd, lse_HT, D, dq_THd, dk_TGd, dv_TGd, dr_THR, dtable_RE);
    case 64: return launch_backward<64>(op, ctx, p, q_THd, k_TGd, v_TGd, r_THR, table_RE, dout_THd, lse_HT, D, dq_THd, dk_TGd, dv_TGd, dr_THR, dtable_RE);
    default: return launch_backward<128>(op, ctx, p, q_THd, k_TGd, v_TGd, r_THR, table_RE, dout_THd, lse_HT, D, dq_THd, dk_TGd, dv_TGd, dr_THR, dtable_RE);
  }
}

namespace attn_wg {

void attention_backward_mma_sync(const DeviceContext& ctx, const Tensor& q_THd, const Tensor& k_TGd,
                                 const Tensor& v_TGd, const Tensor& r_THR, const Tensor& table_RE,
                                 const AttentionParams& params, const Tensor& out_THd, const Tensor& lse_HT,
                                 const Tensor& dout_THd, const Tensor& dq_THd, const Tensor& dk_TGd,
                                 const Tensor& dv_TGd, const Tensor& dr_THR, const Tensor& dtable_RE) {
  const char* op = "attention_backward_mma_sync";
  const attn::Problem p = attn::check_backward(op, q_THd, k_TGd, v_TGd, r_THR, table_RE, params, out_THd, lse_HT, dout_THd,
                                               dq_THd, dk_TGd, dv_TGd, dr_THR, dtable_RE);
  QUILL_CHECK(p.d == 128, "{}: head dim {} is not supported (the mma.sync path is for head dim 128)", op, p.d);
  if (p.T == 0 || p.H == 0) return;
  const Tensor D = attn::output_gradient_dots(ctx, p, dout_THd, out_THd);
  attn_tc::backward(ctx, p, q_THd, k_TGd, v_TGd, r_THR, table_RE, lse_HT, D, dout_THd, dq_THd, dk_TGd, dv_TGd, dr_THR,
                    dtable_RE);
}

}  // namespace attn_wg
}  // namespace quill::cuda
