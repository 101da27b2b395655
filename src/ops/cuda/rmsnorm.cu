// CUDA RMSNorm over the last dimension (ops/rmsnorm.h; dtypes: docs/decisions/cuda-precision.md).
//   forward:  rstd[n] = 1 / sqrt(mean_d(x[n, d]^2) + eps);  y[n, d] = w[d] * (x[n, d] * rstd[n])
//   backward: c[n] = rstd[n]^3 / D * sum_d w[d] dy[n, d] x[n, d]
//             dx[n, d] = rstd[n] w[d] dy[n, d] - c[n] x[n, d]          (overwritten)
//             dw[d]   += sum_n dy[n, d] x[n, d] rstd[n]                 (accumulated)
// Legend: N rows, D features (16..128 for the per-head q/k norm, the model width otherwise).
// Dtypes: x_ND, y_ND, dy_ND, dx_ND BF16 [N, D]; w_D, dw_D F32 [D]; rstd_N F32 [N]. All statistics fp32.
// Layout: one warp per row (8 rows per block) for the row-wise passes, so a 16-wide row wastes half a
// warp and a 4096-wide one loops 128 times per lane; dw is a column reduction: blocks of 32 columns x
// a chunk of rows reduce in shared memory, then one fp32 atomicAdd per column and block.
// y may alias x and dx may alias x or dy: each lane reads an element before writing the same element,
// and the dw reduction runs before dx is written.
#include <algorithm>
#include <cmath>
#include <string>

#include "ops/cuda/cuda_resources.h"
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

// Block (32, 8): column d = blockIdx.x * 32 + threadIdx.x, rows [row0, row1) of chunk blockIdx.y.
__global__ void rmsnorm_backward_dw_kernel(const __nv_bfloat16* x, const float* rstd, const __nv_bfloat16* dy,
                                           int64_t N, int64_t D, int64_t chunk_rows, float* dw) {
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
    atomicAdd(dw + d, s);
  }
}

void check_x(const char* op, const Tensor& x_ND) {
  QUILL_CHECK(x_ND.defined() && x_ND.ndim() == 2, "{}: x must be 2-D [N, D], got {}", op,
              x_ND.defined() ? x_ND.describe() : std::string("(undefined)"));
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
  cudaStream_t stream = stream_of(ctx);
  // dw first: dx may alias dy or x.
  const int64_t col_blocks = (D + 31) / 32;
  const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>((N + 63) / 64, std::max<int64_t>(1, 2048 / col_blocks)));
  const int64_t chunk_rows = (N + chunks - 1) / chunks;
  const dim3 grid(static_cast<unsigned>(col_blocks), static_cast<unsigned>((N + chunk_rows - 1) / chunk_rows));
  rmsnorm_backward_dw_kernel<<<grid, dim3(32, 8), 0, stream>>>(x_ND.data_as<__nv_bfloat16>(), rstd_N.data_as<float>(),
                                                               dy_ND.data_as<__nv_bfloat16>(), N, D, chunk_rows,
                                                               dw_D.data_as<float>());
  QUILL_CUDA_CHECK_LAUNCH("rmsnorm_backward_dw_kernel");
  rmsnorm_backward_dx_kernel<<<row_blocks(N), kWarpsPerBlock * 32, 0, stream>>>(
      x_ND.data_as<__nv_bfloat16>(), w_D.data_as<float>(), rstd_N.data_as<float>(), dy_ND.data_as<__nv_bfloat16>(), N,
      D, dx_ND.data_as<__nv_bfloat16>());
  QUILL_CUDA_CHECK_LAUNCH("rmsnorm_backward_dx_kernel");
}

}  // namespace quill::cuda
