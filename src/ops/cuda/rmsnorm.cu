// CUDA RMSNorm over the last dimension (ops/rmsnorm.h; dtypes: docs/decisions/cuda-precision.md).
//   forward:  rstd[n] = 1 / sqrt(mean_d(x[n, d]^2) + eps);  y[n, d] = w[d] * (x[n, d] * rstd[n])
//   backward: c[n] = rstd[n]^3 / D * sum_d w[d] dy[n, d] x[n, d]
//             dx[n, d] = rstd[n] w[d] dy[n, d] - c[n] x[n, d]          (overwritten)
//             dw[d]   += sum_n dy[n, d] x[n, d] rstd[n]                 (accumulated)
// Legend: N rows, D features (16..128 for the per-head q/k norm, the model width otherwise).
// Dtypes: x_ND, y_ND, dy_ND, dx_ND BF16 [N, D]; w_D, dw_D F32 [D]. rstd_N F32 [N]. All statistics fp32.
//
// Vector path (D % 8 == 0, D <= 8192, x/y/dy/dx 16-byte aligned): a row is C = D / 8 chunks of 8
// bf16 (one 16-byte load each). A group of G threads owns a row, each thread the chunks g + j * G for
// j < kCpt (1, 2 or 4), held in registers between the row's sum and its outputs, so x and dy are read
// once. G is a power of two <= 32 for narrow rows (D = 128: 8 threads of 2 chunks, 4 rows per warp) or
// a multiple of 32 (D = 4096: 256 threads of 2 chunks); a block of <= 256 threads holds R = blockDim / G
// groups and walks rows R at a time over a grid of one resident wave, so every thread keeps the same
// columns throughout and loads its w once. The backward computes dx and dw in that one pass: each thread sums
// dy x rstd for its columns over the rows it visits, the block's groups are reduced in shared memory
// in group order into the block's row of a [blocks, D] scratch, and the rows are added to dw in
// block order by one more kernel (ordered_sum.h): the same bits on every run.
// Scalar path (any other shape or alignment): one warp per row (8 rows per block) for the row-wise
// passes; dw a separate column reduction (blocks of 32 columns x a chunk of rows in shared memory,
// then one row of partial sums per chunk, added in chunk order) that runs before dx is written.
// y may alias x and dx may alias x or dy: on both paths each element is read, by the thread that
// writes its output, before that output is written, and no other thread reads it (the scalar path's
// dw pass finishes before its dx pass starts).
#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <string>

#include "ops/cuda/bf16_units.cuh"
#include "ops/cuda/cuda_resources.h"
#include "ops/cuda/ordered_sum.h"
#include "ops/cuda/kernels.h"
#include "ops/dispatch.h"

namespace quill::cuda {
namespace {

using ops_detail::require_dtype;
using ops_detail::require_shape;

constexpr int kWarpsPerBlock = 8;

void require_device(const char* op, const char* name, const Tensor& t) {
  QUILL_CHECK(t.defined() && t.device() == Device::CUDA, "{}: {} must be in GPU memory, got {}", op, name,
              t.defined() ? t.describe() : std::string("(undefined)"));
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__global__ void rmsnorm_forward_kernel(const __nv_bfloat16* x, const float* w, float eps, int64_t N, int64_t D,
                                       __nv_bfloat16* y, float* rstd) {
  const int lane = threadIdx.x & 31;
  const int64_t n = blockIdx.x * int64_t(kWarpsPerBlock) + (threadIdx.x >> 5);
  if (n >= N) return;
  const __nv_bfloat16* xr = x + n * D;
  float ss = 0.f;
  for (int64_t d = lane; d < D; d += 32) {
    const float v = __bfloat162float(xr[d]);
    ss = fmaf(v, v, ss);
  }
  ss = warp_sum(ss);
  const float r = 1.0f / sqrtf(ss / static_cast<float>(D) + eps);
  if (lane == 0) rstd[n] = r;
  __nv_bfloat16* yr = y + n * D;
  for (int64_t d = lane; d < D; d += 32) yr[d] = __float2bfloat16(w[d] * (__bfloat162float(xr[d]) * r));
}

__global__ void rmsnorm_backward_dx_kernel(const __nv_bfloat16* x, const float* w, const float* rstd,
                                           const __nv_bfloat16* dy, int64_t N, int64_t D, __nv_bfloat16* dx) {
  const int lane = threadIdx.x & 31;
  const int64_t n = blockIdx.x * int64_t(kWarpsPerBlock) + (threadIdx.x >> 5);
  if (n >= N) return;
  const __nv_bfloat16* xr = x + n * D;
  const __nv_bfloat16* dyr = dy + n * D;
  float gx = 0.f;
  for (int64_t d = lane; d < D; d += 32) gx = fmaf(w[d] * __bfloat162float(dyr[d]), __bfloat162float(xr[d]), gx);
  gx = warp_sum(gx);
  const float r = rstd[n];
  const float c = r * r * r * gx / static_cast<float>(D);
  __nv_bfloat16* dxr = dx + n * D;
  for (int64_t d = lane; d < D; d += 32)
    dxr[d] = __float2bfloat16(r * w[d] * __bfloat162float(dyr[d]) - c * __bfloat162float(xr[d]));
}

// Block (32, 8): column d = blockIdx.x * 32 + threadIdx.x, rows [row0, row1) of chunk blockIdx.y,
// whose sums go to row blockIdx.y of `partials` [chunks, D] (added in chunk order afterwards:
// ordered_sum.h).
__global__ void rmsnorm_backward_dw_kernel(const __nv_bfloat16* x, const float* rstd, const __nv_bfloat16* dy,
                                           int64_t N, int64_t D, int64_t chunk_rows, float* partials) {
  __shared__ float part[8][33];
  const int64_t d = blockIdx.x * int64_t(32) + threadIdx.x;
  const int64_t row0 = blockIdx.y * chunk_rows, row1 = min(N, row0 + chunk_rows);
  float acc = 0.f;
  if (d < D)
    for (int64_t n = row0 + threadIdx.y; n < row1; n += 8)
      acc = fmaf(__bfloat162float(dy[n * D + d]) * __bfloat162float(x[n * D + d]), rstd[n], acc);
  part[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && d < D) {
    float s = 0.f;
    for (int i = 0; i < 8; ++i) s += part[i][threadIdx.x];
    partials[blockIdx.y * D + d] = s;
  }
}

// ---- vector path ---------------------------------------------------------------------------------

using units::Bf16Unit;
using units::kVec;

constexpr int kVecBlock = 256;  // threads per block (R groups of G)
constexpr int kMaxCpt = 4;      // chunks per thread at most
constexpr int64_t kVecMaxD = int64_t(kVecBlock) * kMaxCpt * kVec;  // 8192: a row in one block's registers

// Where a thread sits: group `slot` of the block's R groups, thread g of its group's G.
struct RowGroup {
  int G, g, slot, R;
  __device__ RowGroup(int group) : G(group), g(threadIdx.x % group), slot(threadIdx.x / group), R(blockDim.x / group) {}
  __device__ int chunk(int j) const { return g + j * G; }  // chunk j of this thread (valid when < C)
};

// The sum of v over the thread's group, in every thread of the group. G <= 32: shuffles inside the
// warp (G a power of two, so xor partners stay in the group). G > 32: warp sums, then the group's
// warps summed in order through scratch[warp] (one barrier; the caller alternates two scratch arrays
// between calls so that a fast warp cannot overwrite a sum another warp has yet to read).
// Every thread of the block must call it (a block-uniform G).
__device__ __forceinline__ float group_sum(float v, int G, float* scratch) {
  for (int o = (G < 32 ? G : 32) / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (G <= 32) return v;
  const int warp = threadIdx.x >> 5, per_group = G >> 5, first = warp - warp % per_group;
  if ((threadIdx.x & 31) == 0) scratch[warp] = v;
  __syncthreads();
  float s = 0.f;
  for (int i = 0; i < per_group; ++i) s += scratch[first + i];
  return s;
}

// w[8c .. 8c + 8) for the thread's chunks (zeros past the row): loaded once, kept in registers.
template <int kCpt>
__device__ __forceinline__ void load_w(const float* w, const RowGroup& rg, int C, float (&wv)[kCpt][kVec]) {
#pragma unroll
  for (int j = 0; j < kCpt; ++j)
#pragma unroll
    for (int i = 0; i < kVec; ++i) wv[j][i] = rg.chunk(j) < C ? w[rg.chunk(j) * kVec + i] : 0.f;
}

// The thread's chunks of row n (zeros past the row, or for a row past N).
template <int kCpt>
__device__ __forceinline__ void load_row(const __nv_bfloat16* row, bool live, const RowGroup& rg, int C,
                                         Bf16Unit<kVec> (&out)[kCpt]) {
#pragma unroll
  for (int j = 0; j < kCpt; ++j)
    out[j] = live && rg.chunk(j) < C ? units::load_unit<kVec>(row + rg.chunk(j) * kVec) : units::zero_unit<kVec>();
}

// Occupancy: the minimum blocks per SM in __launch_bounds__ hold kCpt <= 2 (D <= 4096) to 64 registers
// forward (4 blocks, 1024 threads per SM, 32 KB of loads in flight) and 85 backward (3 blocks, 48 KB in
// flight); ptxas reports no spills at those limits (sm_90a, CUDA 13.0).
template <int kCpt>
__global__ void __launch_bounds__(kVecBlock, kCpt <= 2 ? 4 : 1)
    rmsnorm_forward_vec_kernel(const __nv_bfloat16* x, const float* w, float eps, int64_t N, int D, int G,
                               __nv_bfloat16* y, float* rstd) {
  __shared__ float scratch[2][kVecBlock / 32];
  const RowGroup rg(G);
  const int C = D / kVec;
  float wv[kCpt][kVec];
  load_w<kCpt>(w, rg, C, wv);
  int parity = 0;
  for (int64_t base = blockIdx.x * int64_t(rg.R); base < N; base += int64_t(gridDim.x) * rg.R, parity ^= 1) {
    const int64_t n = base + rg.slot;
    const bool live = n < N;
    Bf16Unit<kVec> xr[kCpt];
    load_row<kCpt>(x + n * D, live, rg, C, xr);
    float ss = 0.f;
#pragma unroll
    for (int j = 0; j < kCpt; ++j)
#pragma unroll
      for (int i = 0; i < kVec; ++i) ss = fmaf(xr[j][i], xr[j][i], ss);
    ss = group_sum(ss, G, scratch[parity]);
    const float r = 1.0f / sqrtf(ss / static_cast<float>(D) + eps);
    if (!live) continue;  // after the group sum: every thread took part in its barrier
    if (rg.g == 0) rstd[n] = r;
#pragma unroll
    for (int j = 0; j < kCpt; ++j) {
      if (rg.chunk(j) >= C) continue;
      float out[kVec];
#pragma unroll
      for (int i = 0; i < kVec; ++i) out[i] = wv[j][i] * (xr[j][i] * r);
      units::store_unit<kVec>(y + n * D + rg.chunk(j) * kVec, out);
    }
  }
}

template <int kCpt>
__global__ void __launch_bounds__(kVecBlock, kCpt <= 2 ? 3 : 1)
    rmsnorm_backward_vec_kernel(const __nv_bfloat16* x, const float* w, const float* rstd, const __nv_bfloat16* dy,
                                int64_t N, int D, int G, __nv_bfloat16* dx, float* partials) {
  __shared__ float scratch[2][kVecBlock / 32];
  __shared__ float part[kVecBlock * kVec];  // dw partial sums: [group][8G columns of one chunk index]
  const RowGroup rg(G);
  const int C = D / kVec;
  float wv[kCpt][kVec], dwacc[kCpt][kVec];
  load_w<kCpt>(w, rg, C, wv);
#pragma unroll
  for (int j = 0; j < kCpt; ++j)
#pragma unroll
    for (int i = 0; i < kVec; ++i) dwacc[j][i] = 0.f;
  int parity = 0;
  for (int64_t base = blockIdx.x * int64_t(rg.R); base < N; base += int64_t(gridDim.x) * rg.R, parity ^= 1) {
    const int64_t n = base + rg.slot;
    const bool live = n < N;
    Bf16Unit<kVec> xr[kCpt], dyr[kCpt];
    load_row<kCpt>(x + n * D, live, rg, C, xr);
    load_row<kCpt>(dy + n * D, live, rg, C, dyr);
    const float r = live ? rstd[n] : 0.f;
    float gx = 0.f;
#pragma unroll
    for (int j = 0; j < kCpt; ++j)
#pragma unroll
      for (int i = 0; i < kVec; ++i) {
        const float xv = xr[j][i], dyv = dyr[j][i];
        gx = fmaf(wv[j][i] * dyv, xv, gx);
        dwacc[j][i] = fmaf(dyv * xv, r, dwacc[j][i]);  // zero for a row past N (r = 0, zero loads)
      }
    gx = group_sum(gx, G, scratch[parity]);
    if (!live) continue;  // after the group sum: every thread took part in its barrier
    const float c = r * r * r * gx / static_cast<float>(D);
#pragma unroll
    for (int j = 0; j < kCpt; ++j) {
      if (rg.chunk(j) >= C) continue;
      float out[kVec];
#pragma unroll
      for (int i = 0; i < kVec; ++i) out[i] = r * wv[j][i] * dyr[j][i] - c * xr[j][i];
      units::store_unit<kVec>(dx + n * D + rg.chunk(j) * kVec, out);
    }
  }
  // dw: chunk index j covers columns [8Gj, 8G(j + 1)) in every group. Each thread puts its 8 sums in
  // part[thread * 8 + i] = part[slot][8g + i]; then column col of the slab is summed over the R groups
  // in order into this block's row of `partials` [blocks, D] (every column, zeros for a block without
  // rows), which are added in block order afterwards (ordered_sum.h).
#pragma unroll
  for (int j = 0; j < kCpt; ++j) {
    __syncthreads();  // the previous slab's readers (and the row loop's scratch) are done
#pragma unroll
    for (int i = 0; i < kVec; ++i) part[threadIdx.x * kVec + i] = dwacc[j][i];
    __syncthreads();
    const int slab = kVec * G;
    for (int col = threadIdx.x; col < slab; col += blockDim.x) {
      const int d = j * slab + col;
      if (d >= D) break;
      float s = 0.f;
      for (int q = 0; q < rg.R; ++q) s += part[q * slab + col];
      partials[blockIdx.x * int64_t(D) + d] = s;
    }
  }
}

// The vector path's shape for D (cpt == 0: use the scalar path).
struct VecPlan {
  int cpt = 0, group = 0, threads = 0;
};

VecPlan vec_plan(int64_t D, std::initializer_list<const void*> bf16_data) {
  VecPlan p;
  if (D % kVec != 0 || D > kVecMaxD) return p;
  for (const void* ptr : bf16_data)
    if (!units::aligned16(ptr)) return p;
  const int64_t C = D / kVec;
  int cpt = C >= 16 ? 2 : 1;  // 2 chunks (32 bytes of each input) in flight per thread where the row allows
  while (units::ceil_div(C, cpt) > kVecBlock) cpt *= 2;  // <= kMaxCpt, since D <= kVecMaxD
  const int64_t t = units::ceil_div(C, cpt);
  int group = 1;
  if (t <= 32) {
    while (group < t) group *= 2;
  } else {
    group = static_cast<int>(units::ceil_div(t, 32) * 32);
  }
  p.cpt = cpt;
  p.group = group;
  p.threads = (kVecBlock / group) * group;
  return p;
}

void check_x(const char* op, const Tensor& x_ND) {
  QUILL_CHECK(x_ND.defined() && x_ND.ndim() == 2, "{}: x must be 2-D [N, D], got {}", op,
              x_ND.defined() ? x_ND.describe() : std::string("(undefined)"));
}

template <int kCpt>
void launch_forward_vec(const DeviceContext& ctx, const Tensor& x_ND, const Tensor& w_D, double eps,
                        const Tensor& y_ND, const Tensor& rstd_N, const VecPlan& plan) {
  const int64_t N = x_ND.dim(0);
  const int R = plan.threads / plan.group;
  const unsigned blocks = units::resident_blocks(rmsnorm_forward_vec_kernel<kCpt>, plan.threads, 0, ctx.cuda->device,
                                                 units::ceil_div(N, R));
  rmsnorm_forward_vec_kernel<kCpt><<<blocks, plan.threads, 0, stream_of(ctx)>>>(
      x_ND.data_as<__nv_bfloat16>(), w_D.data_as<float>(), static_cast<float>(eps), N, static_cast<int>(x_ND.dim(1)),
      plan.group, y_ND.data_as<__nv_bfloat16>(), rstd_N.data_as<float>());
  QUILL_CUDA_CHECK_LAUNCH("rmsnorm_forward_vec_kernel");
}

template <int kCpt>
void launch_backward_vec(const DeviceContext& ctx, const Tensor& x_ND, const Tensor& w_D, const Tensor& rstd_N,
                         const Tensor& dy_ND, const Tensor& dx_ND, const Tensor& dw_D, const VecPlan& plan) {
  const int64_t N = x_ND.dim(0);
  const int R = plan.threads / plan.group;
  const unsigned blocks = units::resident_blocks(rmsnorm_backward_vec_kernel<kCpt>, plan.threads, 0,
                                                 ctx.cuda->device, units::ceil_div(N, R));
  const int64_t D = x_ND.dim(1);
  Tensor partials = Tensor::empty({static_cast<int64_t>(blocks), D}, DType::F32, *ctx.allocator);
  rmsnorm_backward_vec_kernel<kCpt><<<blocks, plan.threads, 0, stream_of(ctx)>>>(
      x_ND.data_as<__nv_bfloat16>(), w_D.data_as<float>(), rstd_N.data_as<float>(), dy_ND.data_as<__nv_bfloat16>(), N,
      static_cast<int>(D), plan.group, dx_ND.data_as<__nv_bfloat16>(), partials.data_as<float>());
  QUILL_CUDA_CHECK_LAUNCH("rmsnorm_backward_vec_kernel");
  add_partials_in_order(stream_of(ctx), partials.data_as<float>(), blocks, D, dw_D.data_as<float>());
}

unsigned row_blocks(int64_t N) { return static_cast<unsigned>((N + kWarpsPerBlock - 1) / kWarpsPerBlock); }

}  // namespace

void rmsnorm_forward(const DeviceContext& ctx, const Tensor& x_ND, const Tensor& w_D, double eps, const Tensor& y_ND,
                     const Tensor& rstd_N) {
  const char* op = "rmsnorm_forward";
  check_x(op, x_ND);
  const int64_t N = x_ND.dim(0), D = x_ND.dim(1);
  require_shape(op, "w", w_D, {D});
  require_shape(op, "y", y_ND, {N, D});
  require_shape(op, "rstd", rstd_N, {N});
  require_dtype(op, "x", x_ND, DType::BF16);
  require_dtype(op, "w", w_D, DType::F32);
  require_dtype(op, "y", y_ND, DType::BF16);
  require_dtype(op, "rstd", rstd_N, DType::F32);
  for (auto [name, t] : {std::pair<const char*, const Tensor*>{"x", &x_ND}, {"w", &w_D}, {"y", &y_ND}, {"rstd", &rstd_N}})
    require_device(op, name, *t);
  QUILL_CHECK(eps >= 0 && std::isfinite(eps), "{}: eps must be finite and >= 0, got {}", op, eps);
  QUILL_CHECK(D >= 1 || N == 0, "{}: x has no features (shape {})", op, shape_str(x_ND.shape()));
  if (N == 0) return;
  const VecPlan plan = vec_plan(D, {x_ND.data(), y_ND.data()});
  if (plan.cpt != 0) {
    switch (plan.cpt) {
      case 1: return launch_forward_vec<1>(ctx, x_ND, w_D, eps, y_ND, rstd_N, plan);
      case 2: return launch_forward_vec<2>(ctx, x_ND, w_D, eps, y_ND, rstd_N, plan);
      default: return launch_forward_vec<4>(ctx, x_ND, w_D, eps, y_ND, rstd_N, plan);
    }
  }
  rmsnorm_forward_kernel<<<row_blocks(N), kWarpsPerBlock * 32, 0, stream_of(ctx)>>>(
      x_ND.data_as<__nv_bfloat16>(), w_D.data_as<float>(), static_cast<float>(eps), N, D, y_ND.data_as<__nv_bfloat16>(),
      rstd_N.data_as<float>());
  QUILL_CUDA_CHECK_LAUNCH("rmsnorm_forward_kernel");
}

void rmsnorm_backward(const DeviceContext& ctx, const Tensor& x_ND, const Tensor& w_D, const Tensor& rstd_N,
                      const Tensor& dy_ND, const Tensor& dx_ND, const Tensor& dw_D) {
  const char* op = "rmsnorm_backward";
  check_x(op, x_ND);
  const int64_t N = x_ND.dim(0), D = x_ND.dim(1);
  require_shape(op, "w", w_D, {D});
  require_shape(op, "rstd", rstd_N, {N});
  require_shape(op, "dy", dy_ND, {N, D});
  require_shape(op, "dx", dx_ND, {N, D});
  require_shape(op, "dw", dw_D, {D});
  require_dtype(op, "x", x_ND, DType::BF16);
  require_dtype(op, "w", w_D, DType::F32);
  require_dtype(op, "rstd", rstd_N, DType::F32);
  require_dtype(op, "dy", dy_ND, DType::BF16);
  require_dtype(op, "dx", dx_ND, DType::BF16);
  require_dtype(op, "dw", dw_D, DType::F32);
  for (auto [name, t] : {std::pair<const char*, const Tensor*>{"x", &x_ND}, {"w", &w_D}, {"rstd", &rstd_N},
                         {"dy", &dy_ND}, {"dx", &dx_ND}, {"dw", &dw_D}})
    require_device(op, name, *t);
  if (N == 0 || D == 0) return;
  const VecPlan plan = vec_plan(D, {x_ND.data(), dy_ND.data(), dx_ND.data()});
  if (plan.cpt != 0) {
    switch (plan.cpt) {
      case 1: return launch_backward_vec<1>(ctx, x_ND, w_D, rstd_N, dy_ND, dx_ND, dw_D, plan);
      case 2: return launch_backward_vec<2>(ctx, x_ND, w_D, rstd_N, dy_ND, dx_ND, dw_D, plan);
      default: return launch_backward_vec<4>(ctx, x_ND, w_D, rstd_N, dy_ND, dx_ND, dw_D, plan);
    }
  }
  cudaStream_t stream = stream_of(ctx);
  // Scalar path. dw first: dx may alias dy or x.
  const int64_t col_blocks = (D + 31) / 32;
  const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>((N + 63) / 64, std::max<int64_t>(1, 2048 / col_blocks)));
  const int64_t chunk_rows = (N + chunks - 1) / chunks;
  const dim3 grid(static_cast<unsigned>(col_blocks), static_cast<unsigned>((N + chunk_rows - 1) / chunk_rows));
  Tensor partials = Tensor::empty({static_cast<int64_t>(grid.y), D}, DType::F32, *ctx.allocator);
  rmsnorm_backward_dw_kernel<<<grid, dim3(32, 8), 0, stream>>>(x_ND.data_as<__nv_bfloat16>(), rstd_N.data_as<float>(),
                                                               dy_ND.data_as<__nv_bfloat16>(), N, D, chunk_rows,
                                                               partials.data_as<float>());
  QUILL_CUDA_CHECK_LAUNCH("rmsnorm_backward_dw_kernel");
  add_partials_in_order(stream, partials.data_as<float>(), grid.y, D, dw_D.data_as<float>());
  rmsnorm_backward_dx_kernel<<<row_blocks(N), kWarpsPerBlock * 32, 0, stream>>>(
      x_ND.data_as<__nv_bfloat16>(), w_D.data_as<float>(), rstd_N.data_as<float>(), dy_ND.data_as<__nv_bfloat16>(), N,
      D, dx_ND.data_as<__nv_bfloat16>());
  QUILL_CUDA_CHECK_LAUNCH("rmsnorm_backward_dx_kernel");
}

}  // namespace quill::cuda
