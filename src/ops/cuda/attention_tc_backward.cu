// Attention backward on tensor cores for head dim 128 (math: ops/attention.h and the comment of
// attention_backward.cu; fragment layouts: attention_tc.cuh). Flash-attention-2 style: one CTA of 4
// warps per (64-key tile, kv head); each warp owns 16 keys and keeps their dk and dv accumulators
// (fp32, registers) over every query head of the group and every query tile that sees the keys. Per
// (head, query tile), with keys as rows (S^T = K Q^T):
//   P^T  = exp(score - lse)              dV += P^T dO
//   dP^T = V dO^T                        dz  = tau * P * (dP - D)      (fp32)
//   drb[t, h, t - s] = dz                dK += dz^T Q
//   dQ  += dz K  (dz through shared memory; bulk reductions into an fp32 accumulator, below)
// and afterwards dq = scale * dQ (bf16), dk = scale * dK, dr and dtable from drb
// (attention_tc_bias.cu). The next step's Q, dO, per-query lse / D / tau and bias tile load
// (cp.async) overlaps the dQ product. Shared memory: K, V, Q, dO tiles, the 64 x 64 bf16 dz tile,
// the bias tile and the per-query rows, 90 KiB.
// Deterministic dQ (issue 24): many CTAs (the key tiles that see a query tile) add into the same dQ
// rows, and float additions in arrival order gave different bits on every run. Each warp's block of
// a query tile now takes the key tiles' additions in a fixed order, highest key tile first, through a
// counter per (head, query tile, warp): a warp waits until the counter equals the number of key tiles
// above its own that see the query tile, adds, waits for its additions to complete, and increments.
// The grid is launched highest key tile first (kv heads fastest), so a CTA only ever waits for CTAs
// launched before it (no deadlock, whatever the number of resident CTAs); and that is also the order
// in which the additions arrive unordered (a CTA reaches each query tile one step after the CTA of the
// next key tile), so the waits are short. Shortest CTAs first instead of longest first costs the
// tail of the grid little: a list-scheduling model of the global layer's 1,024 CTAs on 264 slots puts
// it 1.3% above the old order (docs/decisions/deterministic-attention-backward.md).
#include "ops/cuda/attention_dq.cuh"
#include "ops/cuda/attention_tc.cuh"
#include "ops/cuda/attention_tc.h"


namespace quill::cuda::attn_tc {
namespace {

constexpr int kThreads = 128;
constexpr float kLog2e = 1.4426950408889634f;

// The 64 x 64 dz tile: rows = keys, 8 chunks of 8 queries, chunk c of row r at c ^ (r % 8).
__device__ __forceinline__ int swz64(int row, int chunk) { return row * kRows + ((chunk ^ (row & 7)) << 3); }

constexpr int kDqStageFloats = 4 * 16 * 64;  // 4 warps x 16 rows x 64 floats
using namespace attn_dq;

__global__ void __launch_bounds__(kThreads, 2)
    attention_tc_backward_kernel(TcProblem p, const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k,
                                 const __nv_bfloat16* __restrict__ v, const __nv_bfloat16* __restrict__ dout,
                                 const float* __restrict__ lse, const float* __restrict__ Dsum,
                                 float* __restrict__ dq_acc, float* __restrict__ drb, __nv_bfloat16* __restrict__ dk,
                                 __nv_bfloat16* __restrict__ dv, int* __restrict__ dq_order, bool longest_first,
                                 bool query_tiles_outer) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  __nv_bfloat16* k_s = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  __nv_bfloat16* v_s = k_s + kTileElems;
  __nv_bfloat16* q_s = v_s + kTileElems;
  __nv_bfloat16* do_s = q_s + kTileElems;
  __nv_bfloat16* dz_s = do_s + kTileElems;  // [64][64]
  float* rb_s = reinterpret_cast<float*>(dz_s + kRows * kRows);  // bias of the tile pair
  float* lse_s = rb_s + kRbTileFloats;                            // lse, D, tau of the 64 queries
  float* d_s = lse_s + kRows;
  float* tau_s = d_s + kRows;
  float* dq_stage = tau_s + kRows;  // this warp's 16 x 64 block at dq_stage + warp * 16 * 64

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, c = lane & 3;
  // Launch order: the last key tile (the fewest query tiles) first, or with longest_first tile 0 first.
  // The ordered dQ additions follow the launch order (shortest first: the highest key tile adds first;
  // longest first: the lowest), so a CTA only ever waits for CTAs launched before it: no deadlock at any
  // T, however few CTAs are resident.
  const int key_tile = longest_first ? blockIdx.y : gridDim.y - 1 - blockIdx.y;
  const int s0 = key_tile * kRows;
  const int kvh = blockIdx.x;
  const int heads_per_kv = p.H / p.G;
  const int64_t q_stride = static_cast<int64_t>(p.H) * kD, kv_stride = static_cast<int64_t>(p.G) * kD;

  // Query tiles that see these keys: from the diagonal to the last row within the window.
  const int t_first = s0;
  const int t_end = p.window > 0 ? min(p.T, s0 + kRows - 1 + p.window) : p.T;  // exclusive
  const int n_qt = (t_end - t_first + kRows - 1) / kRows;
  const int n_iter = n_qt * heads_per_kv;
  // Step order: heads outer, query tiles ascending; or (query_tiles_outer, with the ordered additions
  // longest first) query tiles descending outer, heads inner, so that this CTA reaches each (head, query
  // tile) at the same step as the key tile below it, which adds into that dQ block just before: its wait is
  // about one step, not a head's worth.
  auto head_of = [&](int it) { return kvh * heads_per_kv + (query_tiles_outer ? it % heads_per_kv : it / n_qt); };
  auto tile_of = [&](int it) {
    return t_first + (query_tiles_outer ? n_qt - 1 - it / heads_per_kv : it % n_qt) * kRows;
  };
  // The lowest key tile that sees query tile `qt` (the first to add there when the lowest adds first): key
  // tile j sees query tile qt when j <= qt and 64 qt < 64 j + 63 + window.
  auto lowest_key_tile = [&](int qt) {
    if (p.window <= 0) return 0;
    const int a = qt * kRows - (kRows - 1) - p.window;
    return a < 0 ? 0 : a / kRows + 1;
  };

  auto tile_has_bias = [&](int t0) { return p.rb != nullptr && t0 - (s0 + kRows - 1) < p.E; };
  // Everything step `it` reads besides K and V: Q, dO, the queries' lse, D and tau, the bias tile.
  auto stage_step = [&](int it) {
    const int h = head_of(it), t0 = tile_of(it);
    load_tile_async(q_s, q + static_cast<int64_t>(h) * kD, t0, p.T, q_stride, tid, kThreads);
    load_tile_async(do_s, dout + static_cast<int64_t>(h) * kD, t0, p.T, q_stride, tid, kThreads);
    load_row_floats_async(lse_s, lse + static_cast<int64_t>(h) * p.T, t0, p.T, tid, kThreads);
    load_row_floats_async(d_s, Dsum + static_cast<int64_t>(h) * p.T, t0, p.T, tid, kThreads);
    if (p.tau != nullptr) load_row_floats_async(tau_s, p.tau, t0, p.T, tid, kThreads);
    if (tile_has_bias(t0)) load_bias_tile_async(rb_s, p, h, t0, s0, tid, kThreads);
    cp_async_commit();
  };
  load_tile_async(k_s, k + static_cast<int64_t>(kvh) * kD, s0, p.T, kv_stride, tid, kThreads);
  load_tile_async(v_s, v + static_cast<int64_t>(kvh) * kD, s0, p.T, kv_stride, tid, kThreads);
  cp_async_commit();
  if (n_iter > 0) stage_step(0);

  int s_row[2];
  s_row[0] = s0 + 16 * warp + g;
  s_row[1] = s_row[0] + 8;
  float dk_acc[16][4], dv_acc[16][4];
#pragma unroll
  for (int j = 0; j < 16; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk_acc[j][e] = dv_acc[j][e] = 0.0f;

  // Lane 0's counter to increment once its last dQ additions have completed (ordered additions only).
  int* pending_release = nullptr;
  for (int it = 0; it < n_iter; ++it) {
    const int h = head_of(it), t0 = tile_of(it);
    cp_async_wait_all();  // Q, dO of this step (and K, V the first time)
    __syncthreads();      // ... visible; every warp is done with the previous dz tile

    // S^T = K Q^T: rows = this warp's 16 keys, columns = the 64 queries.
    float st[8][4];
#pragma unroll
    for (int j = 0; j < 8; ++j) st[j][0] = st[j][1] = st[j][2] = st[j][3] = 0.0f;
    mma_strip_by_rows_n(st, k_s, 16 * warp, q_s, lane);
    // P^T = exp(score - lse), 0 where not allowed. Element (j, e): key s_row[e >> 1], query t0 + 8j + 2c + (e & 1).
    const bool full = tile_fully_allowed(p, t0, s0);
    const bool has_bias = tile_has_bias(t0);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int tq = 8 * j + 2 * c + (e & 1), kr = 16 * warp + g + 8 * (e >> 1);
        const int s = s0 + kr, t = t0 + tq;
        const bool ok = full || tc_allowed(p, t, s);
        float pr = 0.0f;
        if (ok) {
          const float tau = p.tau != nullptr ? tau_s[tq] : 1.0f;
          const float bias = has_bias ? rb_s[bias_at(tq, kr)] : 0.0f;
          const float x = tau * kLog2e * fmaf(p.scale, st[j][e], bias);
          pr = fast_exp2(x - lse_s[tq] * kLog2e);
        }
        st[j][e] = pr;
      }
    }
    // dV += P^T dO
    mma_acc_by_rows_k(dv_acc, st, do_s, lane);
    // dP^T = V dO^T
    float dpt[8][4];
#pragma unroll
    for (int j = 0; j < 8; ++j) dpt[j][0] = dpt[j][1] = dpt[j][2] = dpt[j][3] = 0.0f;
    mma_strip_by_rows_n(dpt, v_s, 16 * warp, do_s, lane);
    // The previous step's dQ additions have had three tile products' time to land: pass the turn on.
    if (lane == 0 && pending_release != nullptr) release_turn(pending_release);
    // dz = tau * P * (dP - D); its bias-row gradient; dz^T into shared memory for dQ. drb's index
    // (t * H + h) * E + (t - s) grows by H * E + 1 per query: one base per key row, constant steps.
    const int64_t drb_step = static_cast<int64_t>(p.H) * p.E + 1;
    int64_t drb_base[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) drb_base[i] = (t0 + 2 * c) * drb_step + static_cast<int64_t>(h) * p.E - s_row[i];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int tq = 8 * j + 2 * c + (e & 1);
        const int s = s_row[e >> 1], t = t0 + tq;
        float dz = 0.0f;
        if (full || tc_allowed(p, t, s)) {
          const float tau = p.tau != nullptr ? tau_s[tq] : 1.0f;
          dz = tau * st[j][e] * (dpt[j][e] - d_s[tq]);
          if (has_bias && t - s < p.E) drb[drb_base[e >> 1] + (8 * j + (e & 1)) * drb_step] = dz;
        }
        dpt[j][e] = dz;
      }
#pragma unroll
      for (int i = 0; i < 2; ++i)
        *reinterpret_cast<__nv_bfloat162*>(dz_s + swz64(16 * warp + g + 8 * i, j) + 2 * c) =
            __floats2bfloat162_rn(dpt[j][2 * i], dpt[j][2 * i + 1]);
    }
    // dK += dz^T Q
    mma_acc_by_rows_k(dk_acc, dpt, q_s, lane);
    __syncthreads();  // dz tile complete; every warp is done with Q, dO and the staged rows
    if (it + 1 < n_iter) stage_step(it + 1);
    // dQ[t0 + 16 warp ..][:] += dz K: A = dz (queries x keys) from the transposed tile, B = K.
    uint32_t za[4][4];
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const int krow = 16 * kk + (lane & 7) + 8 * (lane >> 4);
      const int chunk = 2 * warp + ((lane >> 3) & 1);
      ldsm_x4_t(za[kk], dz_s + swz64(krow, chunk));
    }
    float* stage = dq_stage + warp * 16 * 64;
    const int64_t t_pad = (p.T + kRows - 1) / kRows * kRows;
#pragma unroll
    for (int part = 0; part < 2; ++part) {  // head dims 64 part .. 64 part + 63
      float acc[8][4];
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
#pragma unroll
      for (int nd2 = 0; nd2 < 4; ++nd2) {
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
          uint32_t b[4];
          load_b_rows_k(b, k_s, 64 * part + 16 * nd2, kk, lane);
          mma(acc[2 * nd2], za[kk], b[0], b[1]);
          mma(acc[2 * nd2 + 1], za[kk], b[2], b[3]);
        }
      }
      if (lane == 0) bulk_wait_read();  // the previous reduction has read the staging block
      __syncwarp();
      int* order = nullptr;  // this warp's counter for (h, query tile), when the additions are ordered
      if (dq_order != nullptr)
        order = dq_order + ((static_cast<int64_t>(h) * (t_pad / kRows) + t0 / kRows) * 4 + warp);
      // Rows g and g + 8 of the block are queries t0 + 16 warp + g (+ 8): t % 8 = g for both.
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        *reinterpret_cast<float2*>(stage + g * 64 + dq_unit_col(g, 8 * j + 2 * c)) = make_float2(acc[j][0], acc[j][1]);
        *reinterpret_cast<float2*>(stage + (g + 8) * 64 + dq_unit_col(g, 8 * j + 2 * c)) =
            make_float2(acc[j][2], acc[j][3]);
      }
      fence_proxy_async_smem();  // the generic-proxy writes above, visible to the bulk copy engine
      __syncwarp();
      if (lane == 0) {
        if (order != nullptr && part == 0) {
          // Shortest first: the key tiles above this one that see query tile t0 (down to the diagonal) add
          // first; longest first: those below it, from the lowest that sees t0.
          const int before = longest_first ? key_tile - lowest_key_tile(t0 / kRows) : t0 / kRows - key_tile;
          while (load_acquire(order) != before) {
          }
          fence_proxy_async_global();
        }
        bulk_reduce_add_f32(dq_acc + ((static_cast<int64_t>(h) * 2 + part) * t_pad + t0 + 16 * warp) * 64, stage,
                            16 * 64 * sizeof(float));
        bulk_commit();
        if (part == 1) pending_release = order;  // released once both halves have landed (below)
      }
    }
  }

  if (lane == 0) bulk_wait_all();  // the staging block stays valid until every reduction has completed
  if (lane == 0 && pending_release != nullptr) release_turn(pending_release);
  // dk = scale * dK, dv = dV, written once in bf16.
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int s = s_row[i];
    if (s >= p.T) continue;
    __nv_bfloat16* dk_s = dk + (static_cast<int64_t>(s) * p.G + kvh) * kD;
    __nv_bfloat16* dv_s = dv + (static_cast<int64_t>(s) * p.G + kvh) * kD;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      *reinterpret_cast<__nv_bfloat162*>(dk_s + 8 * j + 2 * c) =
          __floats2bfloat162_rn(p.scale * dk_acc[j][2 * i], p.scale * dk_acc[j][2 * i + 1]);
      *reinterpret_cast<__nv_bfloat162*>(dv_s + 8 * j + 2 * c) =
          __floats2bfloat162_rn(dv_acc[j][2 * i], dv_acc[j][2 * i + 1]);
    }
  }
}

// dq[t, h, :] = scale * dQ, in bf16, from the accumulator's [H][2][T_pad][64] unit-permuted layout.
__global__ void dq_finish_kernel(int T, int H, float scale, const float* __restrict__ acc, __nv_bfloat16* __restrict__ dq) {
  const int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * 4;  // into dq [T, H, 128]
  if (i >= static_cast<int64_t>(T) * H * kD) return;
  const int col = static_cast<int>(i % kD), h = static_cast<int>((i / kD) % H);
  const int64_t t = i / (static_cast<int64_t>(H) * kD);
  const int64_t t_pad = (T + kRows - 1) / kRows * kRows;
  const float4 a = *reinterpret_cast<const float4*>(acc + ((static_cast<int64_t>(h) * 2 + col / 64) * t_pad + t) * 64 +
                                                    dq_unit_col(static_cast<int>(t & 7), col % 64));
  *reinterpret_cast<__nv_bfloat162*>(dq + i) = __floats2bfloat162_rn(scale * a.x, scale * a.y);
  *reinterpret_cast<__nv_bfloat162*>(dq + i + 2) = __floats2bfloat162_rn(scale * a.z, scale * a.w);
}

}  // namespace

Tensor zeroed_bias_grad(const DeviceContext& ctx, const attn::Problem& p) {
  // The kernels store every (t, u) with an allowed pair: u <= t and u < window. Zero the rest first.
  Tensor drb = Tensor::empty({p.T, p.H, p.E}, DType::F32, *ctx.allocator);
  const bool window_below_E = p.window > 0 && p.window < p.E;
  const int64_t zero_rows = window_below_E ? p.T : std::min(p.T, p.E);
  QUILL_CUDA_CHECK(cudaMemsetAsync(drb.data(), 0, zero_rows * p.H * p.E * sizeof(float), stream_of(ctx)));
  return drb;
}

void finish_dq(const DeviceContext& ctx, const attn::Problem& p, const Tensor& dq_acc, const Tensor& dq_THd) {
  const int64_t n4 = p.T * p.H * kD / 4;
  dq_finish_kernel<<<static_cast<unsigned>((n4 + 255) / 256), 256, 0, stream_of(ctx)>>>(
      static_cast<int>(p.T), static_cast<int>(p.H), p.scale, dq_acc.data_as<float>(), dq_THd.data_as<__nv_bfloat16>());
  QUILL_CUDA_CHECK_LAUNCH("dq_finish_kernel");
}

void backward(const DeviceContext& ctx, const attn::Problem& p, const Tensor& q_THd, const Tensor& k_TGd,
              const Tensor& v_TGd, const Tensor& r_THR, const Tensor& table_RE, const Tensor& lse_HT,
              const Tensor& D_HT, const Tensor& dout_THd, const Tensor& dq_THd, const Tensor& dk_TGd,
              const Tensor& dv_TGd, const Tensor& dr_THR, const Tensor& dtable_RE) {
  const cudaStream_t stream = stream_of(ctx);
  Tensor rb, drb, tau;
  TcProblem tp{p.T, p.H, p.G, p.E, p.window, p.scale, nullptr, nullptr};
  const bool bias = p.R > 0 && p.E > 0;
  if (bias) {
    // The bias rows are recomputed here rather than kept from the forward: 0.5-1 GiB per layer would
    // otherwise stay live from a layer's forward to its backward, for ~0.2 ms of work saved.
    rb = Tensor::empty({p.T, p.H, p.E}, DType::F32, *ctx.allocator);
    bias_rows(ctx, p, r_THR, table_RE, rb, bias_rows_path(ctx));
    tp.rb = rb.data_as<float>();
    drb = zeroed_bias_grad(ctx, p);
  } else if (p.R > 0) {
    QUILL_CUDA_CHECK(cudaMemsetAsync(dr_THR.data(), 0, dr_THR.nbytes(), stream));
  }
  if (p.log_scaling) {
    tau = Tensor::empty({p.T}, DType::F32, *ctx.allocator);
    tau_rows(ctx, p, tau);
    tp.tau = tau.data_as<float>();
  }
  const int64_t t_pad = (p.T + kRows - 1) / kRows * kRows;
  Tensor dq_acc = Tensor::empty({p.H, 2, t_pad, kD / 2}, DType::F32, *ctx.allocator);
  QUILL_CUDA_CHECK(cudaMemsetAsync(dq_acc.data(), 0, dq_acc.nbytes(), stream));

  const size_t smem = (4 * kTileElems + kRows * kRows) * sizeof(__nv_bfloat16) +
                      (kRbTileFloats + 3 * kRows + kDqStageFloats) * sizeof(float);
  attn::set_smem("attention_backward", reinterpret_cast<const void*>(&attention_tc_backward_kernel), smem);
  const dim3 grid(p.G, (p.T + kRows - 1) / kRows);
  // Either launch order is deadlock-free with the ordered additions (they follow it); which is faster was
  // measured (bench/results/2026-12-04-determinism-cost, T = 8,192): with the order, global layers longest
  // first (12.7 ms against 14.9), local (windowed, CTAs of about equal length) shortest first (3.50 against
  // 3.85); without it, longest first (11.4 against 13.6 global).
  const bool ordered = !arrival_order_dq(ctx);
  const bool longest_first = !ordered || p.window <= 0;
  Tensor dq_order;
  if (ordered) {
    dq_order = Tensor::empty({p.H, t_pad / kRows, 4}, DType::I32, *ctx.allocator);
    QUILL_CUDA_CHECK(cudaMemsetAsync(dq_order.data(), 0, dq_order.nbytes(), stream));
  }
  attention_tc_backward_kernel<<<grid, kThreads, smem, stream>>>(
      tp, q_THd.data_as<__nv_bfloat16>(), k_TGd.data_as<__nv_bfloat16>(), v_TGd.data_as<__nv_bfloat16>(),
      dout_THd.data_as<__nv_bfloat16>(), lse_HT.data_as<float>(), D_HT.data_as<float>(), dq_acc.data_as<float>(),
      bias ? drb.data_as<float>() : nullptr, dk_TGd.data_as<__nv_bfloat16>(), dv_TGd.data_as<__nv_bfloat16>(),
      dq_order.defined() ? dq_order.data_as<int>() : nullptr, longest_first, ordered && longest_first);
  QUILL_CUDA_CHECK_LAUNCH("attention_tc_backward_kernel");

  finish_dq(ctx, p, dq_acc, dq_THd);
  if (bias) bias_rows_backward(ctx, p, r_THR, table_RE, drb, dr_THR, dtable_RE, bias_rows_path(ctx));
}

}  // namespace quill::cuda::attn_tc
