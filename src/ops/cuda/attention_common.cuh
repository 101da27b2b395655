// Shared pieces of the CUDA attention kernels (attention_forward.cu, attention_backward.cu): the
// tile geometry, the per-pair math (mask, log-scaling tau, relative bias) and the shared-memory
// tile loaders and micro-kernel. The math is ops/attention.h's; this file only fixes how a CTA
// walks it.
//
// Legend: T positions, H query heads, G kv heads (head h reads kv head h / (H/G)), d head dim
// (padded to DPAD in {16, 32, 64, 128} inside shared memory), R bias rank, E bias extent.
//
// Tile geometry (every kernel): a CTA of 256 threads works on a 64 x 64 tile of (row, column)
// pairs; thread (ty, tx) = (tid / 16, tid % 16) owns rows 4ty .. 4ty+3 and columns tx + 16j,
// j = 0..3. The 16 threads that share a row are one half-warp, so a row reduction is four
// shuffles. Products of two shared-memory tiles go through `micro_mma`, whose operand strides are
// compile-time constants, so a tile can be read row-major or transposed without a copy.
//
// Shared-memory layouts (fp32, `float`):
//   head-dim tiles  x_s[64][DPAD + 1]   row = position, column = head-dim index (odd stride: a
//                                        column walk across a half-warp hits 16 distinct banks)
//   pair tiles      p_s[64][65]         row = query, column = key (P or dz = tau * dS)
//   bias rows       r_s[64][R | 1]      row = query, column = rank index
//   table slice     tab_s[R][128]       tab_s[i][u] = table[i, dmin + u], zero outside [0, E);
//                                        for a query tile at t0 and key tile at s0 every pair's
//                                        distance t - s lies in dmin .. dmin + 126, dmin = t0 - s0 - 63,
//                                        and u = (t - t0) - (s - s0) + 63.
// Rows past T are loaded as zeros (never garbage: 0 * NaN would poison a product) and masked.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstdint>

#include "ops/attention.h"
#include "ops/cuda/cuda_resources.h"
#include "ops/dispatch.h"

namespace quill::cuda::attn {

constexpr int kTile = 64;           // rows of a query tile and of a key tile
constexpr int kThreads = 256;       // 16 x 16
constexpr int kPairLd = kTile + 1;  // leading dimension of P and dz tiles
constexpr int kTabW = 2 * kTile;    // staged table columns per tile pair (127 used)

// The problem, as the kernels read it. `window` is 0 for full causal (a window >= T is made 0).
struct Problem {
  int T, H, G, d, R, E;
  int window;
  float scale;
  bool log_scaling;
  double log_floor, log_alpha;
};

// Leading dimension of a bias-row tile: R rounded up to odd, so a walk down its rows is conflict-free.
__host__ __device__ inline int rank_ld(int R) { return R | 1; }

__device__ __forceinline__ float tau_at(const Problem& p, int t) {
  // The CPU reference computes tau in double and rounds once; so do we.
  if (!p.log_scaling) return 1.0f;
  return static_cast<float>(1.0 + p.log_alpha * log(fmax(static_cast<double>(t + 1) / p.log_floor, 1.0)));
}

__device__ __forceinline__ bool allowed(const Problem& p, int t, int s) {
  return t < p.T && s <= t && (p.window == 0 || t - s < p.window);
}

// acc[i][j] += sum_{k < K} A(4ty + i, k) * B(tx + 16 j, k), where A(m, k) = A[m * AM + k * AK] and
// B(n, k) = B[n * BN + k * BK].
template <int NJ, int AM, int AK, int BN, int BK>
__device__ __forceinline__ void micro_mma(float (&acc)[4][NJ], const float* __restrict__ A,
                                          const float* __restrict__ B, int K, int ty, int tx) {
  const float* a = A + 4 * ty * AM;
  const float* b = B + tx * BN;
#pragma unroll 4
  for (int k = 0; k < K; ++k) {
    float av[4], bv[NJ];
#pragma unroll
    for (int i = 0; i < 4; ++i) av[i] = a[i * AM + k * AK];
#pragma unroll
    for (int j = 0; j < NJ; ++j) bv[j] = b[16 * j * BN + k * BK];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < NJ; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
  }
}

// dst[rr][n] (stride DPAD + 1) = src[(row0 + rr) * row_stride + n] for rr < 64, n < d, row0 + rr < T;
// zero elsewhere (rows past T and the padding columns d .. DPAD-1). `src` already points at the head.
template <int DPAD>
__device__ __forceinline__ void load_head_tile(float* __restrict__ dst, const __nv_bfloat16* __restrict__ src,
                                               int row0, int T, int64_t row_stride, int d) {
  constexpr int LDD = DPAD + 1;
  for (int idx = threadIdx.x; idx < kTile * DPAD; idx += kThreads) {
    const int rr = idx / DPAD, n = idx % DPAD;
    float x = 0.0f;
    if (row0 + rr < T && n < d) x = __bfloat162float(src[static_cast<int64_t>(row0 + rr) * row_stride + n]);
    dst[rr * LDD + n] = x;
  }
}

// r_s[rr][i] (stride R | 1) = r[t0 + rr, h, i], zero for rows past T.
__device__ __forceinline__ void load_bias_rows(float* __restrict__ r_s, const __nv_bfloat16* __restrict__ r,
                                               const Problem& p, int t0, int h) {
  const int ld = rank_ld(p.R);
  for (int idx = threadIdx.x; idx < kTile * p.R; idx += kThreads) {
    const int rr = idx / p.R, i = idx % p.R;
    float x = 0.0f;
    if (t0 + rr < p.T) x = __bfloat162float(r[(static_cast<int64_t>(t0 + rr) * p.H + h) * p.R + i]);
    r_s[rr * ld + i] = x;
  }
}

// tab_s[i][u] = table[i, dmin + u] for u < 127 and 0 <= dmin + u < E; zero elsewhere.
__device__ __forceinline__ void load_table_slice(float* __restrict__ tab_s, const float* __restrict__ table,
                                                 const Problem& p, int dmin) {
  for (int idx = threadIdx.x; idx < p.R * kTabW; idx += kThreads) {
    const int i = idx / kTabW, u = idx % kTabW;
    const int dist = dmin + u;
    tab_s[idx] = (u < kTabW - 1 && dist >= 0 && dist < p.E) ? table[static_cast<int64_t>(i) * p.E + dist] : 0.0f;
  }
}

// The relative bias of the thread's 4 x 4 pairs. kQueryRows: rows are queries (4ty + i) and columns
// keys (tx + 16j), as in the forward and the dq kernel; otherwise rows are keys and columns queries,
// as in the dk/dv kernel. Pairs whose distance is outside [0, E) get 0 from the zero-filled slice.
template <bool kQueryRows>
__device__ __forceinline__ void add_bias(float (&bias)[4][4], const float* __restrict__ r_s,
                                         const float* __restrict__ tab_s, int R, int ty, int tx) {
  const int ld = rank_ld(R);
  for (int l = 0; l < R; ++l) {
    const float* tab = tab_s + l * kTabW;
    if (kQueryRows) {
      float rv[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) rv[i] = r_s[(4 * ty + i) * ld + l];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) bias[i][j] = fmaf(rv[i], tab[(4 * ty + i) - (tx + 16 * j) + kTile - 1], bias[i][j]);
    } else {
      float rv[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) rv[j] = r_s[(tx + 16 * j) * ld + l];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) bias[i][j] = fmaf(rv[j], tab[(tx + 16 * j) - (4 * ty + i) + kTile - 1], bias[i][j]);
    }
  }
}

// Shared memory, in floats, of each kernel (host and device agree through these).
template <int DPAD>
__host__ __device__ constexpr int head_tile_floats() { return kTile * (DPAD + 1); }
__host__ __device__ inline int pair_tile_floats() { return kTile * kPairLd; }
__host__ __device__ inline int bias_rows_floats(int R) { return kTile * rank_ld(R); }
__host__ __device__ inline int table_slice_floats(int R) { return R * kTabW; }

// ---- Host side: argument checks shared by the forward and backward launchers. ----

inline void require_device(const char* op, const char* name, const Tensor& t, const Shape& shape, DType dtype) {
  ops_detail::require_shape(op, name, t, shape);
  ops_detail::require_dtype(op, name, t, dtype);
  QUILL_CHECK(t.device() == Device::CUDA, "{}: {} lives on {}, the CUDA backend needs it on cuda", op, name,
              device_name(t.device()));
}

// Checks q, k, v, r (BF16) and the table (F32) and the parameters; returns the problem they describe.
inline Problem make_problem(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& r,
                            const Tensor& table, const ops::AttentionParams& params) {
  QUILL_CHECK(q.defined() && q.ndim() == 3, "{}: q_THd must be [T, H, d], got {}", op,
              q.defined() ? q.describe() : std::string("(undefined)"));
  QUILL_CHECK(k.defined() && k.ndim() == 3, "{}: k_TGd must be [T, G, d], got {}", op,
              k.defined() ? k.describe() : std::string("(undefined)"));
  QUILL_CHECK(r.defined() && r.ndim() == 3, "{}: r_THR must be [T, H, R], got {}", op,
              r.defined() ? r.describe() : std::string("(undefined)"));
  QUILL_CHECK(table.defined() && table.ndim() == 2, "{}: table_RE must be [R, E], got {}", op,
              table.defined() ? table.describe() : std::string("(undefined)"));
  const int64_t T = q.dim(0), H = q.dim(1), d = q.dim(2), G = k.dim(1), R = r.dim(2), E = table.dim(1);
  QUILL_CHECK(G > 0 && H % G == 0, "{}: q_THd has {} heads, not a multiple of k_TGd's {} kv heads", op, H, G);
  require_device(op, "q_THd", q, {T, H, d}, DType::BF16);
  require_device(op, "k_TGd", k, {T, G, d}, DType::BF16);
  require_device(op, "v_TGd", v, {T, G, d}, DType::BF16);
  require_device(op, "r_THR", r, {T, H, R}, DType::BF16);
  require_device(op, "table_RE", table, {R, E}, DType::F32);
  QUILL_CHECK(d >= 1 && d <= 128, "{}: head dim {} is not supported by the CUDA attention kernels (1..128)", op, d);
  QUILL_CHECK(R <= 64, "{}: bias rank {} is not supported by the CUDA attention kernels (at most 64)", op, R);
  QUILL_CHECK(T < INT_MAX / 2 && H < INT_MAX && E < INT_MAX, "{}: sizes T={} H={} E={} too large", op, T, H, E);
  QUILL_CHECK(params.window >= 0, "{}: window must be >= 0 (0 = full causal), got {}", op, params.window);
  QUILL_CHECK(std::isfinite(params.scale), "{}: scale must be finite, got {}", op, params.scale);
  QUILL_CHECK(!params.log_scaling || (params.log_floor > 0 && std::isfinite(params.log_alpha)),
              "{}: log scaling needs log_floor > 0 and a finite log_alpha, got {} and {}", op, params.log_floor,
              params.log_alpha);
  Problem p;
  p.T = static_cast<int>(T);
  p.H = static_cast<int>(H);
  p.G = static_cast<int>(G);
  p.d = static_cast<int>(d);
  p.R = static_cast<int>(R);
  p.E = static_cast<int>(E);
  p.window = (params.window == 0 || params.window >= T) ? 0 : static_cast<int>(params.window);
  p.scale = static_cast<float>(params.scale);
  p.log_scaling = params.log_scaling;
  p.log_floor = params.log_floor;
  p.log_alpha = params.log_alpha;
  return p;
}

// The padded head dim a kernel is instantiated for.
inline int head_dim_pad(int d) { return d <= 16 ? 16 : d <= 32 ? 32 : d <= 64 ? 64 : 128; }

// The backward's argument checks (every tensor's shape, dtype and device) and D[h, t] = dout[t, h] .
// out[t, h] as an fp32 [H, T] workspace (attention_backward.cu; shared by its three paths).
Problem check_backward(const char* op, const Tensor& q_THd, const Tensor& k_TGd, const Tensor& v_TGd,
                       const Tensor& r_THR, const Tensor& table_RE, const ops::AttentionParams& params,
                       const Tensor& out_THd, const Tensor& lse_HT, const Tensor& dout_THd, const Tensor& dq_THd,
                       const Tensor& dk_TGd, const Tensor& dv_TGd, const Tensor& dr_THR, const Tensor& dtable_RE);
Tensor output_gradient_dots(const DeviceContext& ctx, const Problem& p, const Tensor& dout_THd, const Tensor& out_THd);

// Raises a kernel's dynamic shared-memory limit to `bytes`, after checking the device allows it.
inline void set_smem(const char* op, const void* kernel, size_t bytes) {
  int dev = 0, limit = 0;
  QUILL_CUDA_CHECK(cudaGetDevice(&dev));
  QUILL_CUDA_CHECK(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  QUILL_CHECK(bytes <= static_cast<size_t>(limit), "{}: needs {} bytes of shared memory per block, the device allows {}",
              op, bytes, limit);
  QUILL_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

}  // namespace quill::cuda::attn
