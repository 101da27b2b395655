// CUDA depthwise causal short convolution with residual (ops/short_conv.h; dtypes:
// docs/decisions/cuda-precision.md).
//   forward:  y[t, c] = x[t, c] + sum_{j<K} w[c, j] * x[t - (K-1) + j, c]       (x[negative] = 0)
//   backward: dx[s, c] = dy[s, c] + sum_{j<K} w[c, j] * dy[s + (K-1) - j, c]   (dy[>= T] = 0; overwritten)
//             dw[c, j] += sum_t dy[t, c] * x[t - (K-1) + j, c]                  (accumulated)
// Legend: T positions of one sequence, C channels, K taps (1..kMaxTaps; Inkling uses 4).
// Dtypes: x_TC, y_TC, dy_TC, dx_TC BF16 [T, C]; w_CK, dw_CK F32 [C, K]. All arithmetic fp32, taps
// added in j order as the CPU reference does.
// Layout: one thread per output element (consecutive threads on consecutive channels, so every tap
// read is coalesced); dw is a reduction over T: blocks of 32 channels x a chunk of positions reduce
// in shared memory, then one fp32 atomicAdd per (channel, tap) and block.
// y must not alias x, nor dx alias dy or x (outputs are written while neighbours are still read).
#include <algorithm>
#include <string>

#include "ops/cuda/cuda_resources.h"
#include "ops/cuda/kernels.h"
#include "ops/dispatch.h"

namespace quill::cuda {
namespace {

using ops_detail::require_dtype;
using ops_detail::require_shape;

constexpr int kMaxTaps = 8;
constexpr int kThreads = 256;

void require_device(const char* op, const char* name, const Tensor& t) {
  QUILL_CHECK(t.defined() && t.device() == Device::CUDA, "{}: {} must be in GPU memory, got {}", op, name,
              t.defined() ? t.describe() : std::string("(undefined)"));
}

__global__ void short_conv_forward_kernel(const __nv_bfloat16* x, const float* w, int64_t T, int64_t C, int K,
                                          __nv_bfloat16* y) {
  const int64_t total = T * C;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / C, c = i - t * C;
    float acc = __bfloat162float(x[i]);
    for (int j = 0; j < K; ++j) {
      const int64_t s = t - (K - 1) + j;
      if (s >= 0) acc += w[c * K + j] * __bfloat162float(x[s * C + c]);
    }
    y[i] = __float2bfloat16(acc);
  }
}

__global__ void short_conv_backward_dx_kernel(const float* w, const __nv_bfloat16* dy, int64_t T, int64_t C, int K,
                                              __nv_bfloat16* dx) {
  const int64_t total = T * C;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t s = i / C, c = i - s * C;
    float acc = __bfloat162float(dy[i]);
    for (int j = 0; j < K; ++j) {
      const int64_t t = s + (K - 1) - j;
      if (t < T) acc += w[c * K + j] * __bfloat162float(dy[t * C + c]);
    }
    dx[i] = __float2bfloat16(acc);
  }
}

// Block (32, 8): channel c = blockIdx.x * 32 + threadIdx.x, positions [t0, t1) of chunk blockIdx.y.
__global__ void short_conv_backward_dw_kernel(const __nv_bfloat16* x, const __nv_bfloat16* dy, int64_t T, int64_t C,
                                              int K, int64_t chunk_rows, float* dw) {
  __shared__ float part[kMaxTaps][8][33];
  const int64_t c = blockIdx.x * int64_t(32) + threadIdx.x;
  const int64_t t0 = blockIdx.y * chunk_rows, t1 = min(T, t0 + chunk_rows);
  float acc[kMaxTaps];
#pragma unroll
  for (int j = 0; j < kMaxTaps; ++j) acc[j] = 0.f;
  if (c < C) {
    for (int64_t t = t0 + threadIdx.y; t < t1; t += 8) {
      const float g = __bfloat162float(dy[t * C + c]);
#pragma unroll
      for (int j = 0; j < kMaxTaps; ++j) {
        const int64_t src = t - (K - 1) + j;
        if (j < K && src >= 0) acc[j] = fmaf(g, __bfloat162float(x[src * C + c]), acc[j]);
      }
    }
  }
#pragma unroll
  for (int j = 0; j < kMaxTaps; ++j) part[j][threadIdx.y][threadIdx.x] = acc[j];
  __syncthreads();
  // Thread (x, y) finishes tap y (and tap y + 8 would need kMaxTaps > 8).
  const int j = threadIdx.y;
  if (j < K && c < C) {
    float s = 0.f;
    for (int i = 0; i < 8; ++i) s += part[j][i][threadIdx.x];
    atomicAdd(dw + c * K + j, s);
  }
}

void check_2d(const char* op, const char* name, const char* dims, const Tensor& t) {
  QUILL_CHECK(t.defined() && t.ndim() == 2, "{}: {} must be 2-D {}, got {}", op, name, dims,
              t.defined() ? t.describe() : std::string("(undefined)"));
}

// Shared checks of x and w; returns K.
int check_x_w(const char* op, const Tensor& x_TC, const Tensor& w_CK) {
  check_2d(op, "x", "[T, C]", x_TC);
  check_2d(op, "w", "[C, K]", w_CK);
  const int64_t C = x_TC.dim(1), K = w_CK.dim(1);
  QUILL_CHECK(K >= 1 && K <= kMaxTaps, "{}: w has {} taps (shape {}); the CUDA kernel supports 1..{}", op, K,
              shape_str(w_CK.shape()), kMaxTaps);
  require_shape(op, "w", w_CK, {C, K});
  require_dtype(op, "x", x_TC, DType::BF16);
  require_dtype(op, "w", w_CK, DType::F32);
  require_device(op, "x", x_TC);
  require_device(op, "w", w_CK);
  return static_cast<int>(K);
}

unsigned elementwise_blocks(int64_t n) {
  return static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, 132 * 32));
}

}  // namespace

void short_conv_forward(const DeviceContext& ctx, const Tensor& x_TC, const Tensor& w_CK, const Tensor& y_TC) {
  const char* op = "short_conv_forward";
  const int K = check_x_w(op, x_TC, w_CK);
  require_shape(op, "y", y_TC, x_TC.shape());
  require_dtype(op, "y", y_TC, DType::BF16);
  require_device(op, "y", y_TC);
  QUILL_CHECK(y_TC.data() != x_TC.data() || x_TC.numel() == 0, "{}: y must not alias x", op);
  const int64_t T = x_TC.dim(0), C = x_TC.dim(1);
  if (T * C == 0) return;
  short_conv_forward_kernel<<<elementwise_blocks(T * C), kThreads, 0, stream_of(ctx)>>>(
      x_TC.data_as<__nv_bfloat16>(), w_CK.data_as<float>(), T, C, K, y_TC.data_as<__nv_bfloat16>());
  QUILL_CUDA_CHECK_LAUNCH("short_conv_forward_kernel");
}

void short_conv_backward(const DeviceContext& ctx, const Tensor& x_TC, const Tensor& w_CK, const Tensor& dy_TC,
                         const Tensor& dx_TC, const Tensor& dw_CK) {
  const char* op = "short_conv_backward";
  const int K = check_x_w(op, x_TC, w_CK);
  require_shape(op, "dy", dy_TC, x_TC.shape());
  require_shape(op, "dx", dx_TC, x_TC.shape());
  require_shape(op, "dw", dw_CK, w_CK.shape());
  require_dtype(op, "dy", dy_TC, DType::BF16);
  require_dtype(op, "dx", dx_TC, DType::BF16);
  require_dtype(op, "dw", dw_CK, DType::F32);
  require_device(op, "dy", dy_TC);
  require_device(op, "dx", dx_TC);
  require_device(op, "dw", dw_CK);
  QUILL_CHECK((dx_TC.data() != dy_TC.data() && dx_TC.data() != x_TC.data()) || x_TC.numel() == 0,
              "{}: dx must not alias dy or x", op);
  const int64_t T = x_TC.dim(0), C = x_TC.dim(1);
  if (T * C == 0) return;
  cudaStream_t stream = stream_of(ctx);
  const int64_t col_blocks = (C + 31) / 32;
  const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>((T + 63) / 64, std::max<int64_t>(1, 2048 / col_blocks)));
  const int64_t chunk_rows = (T + chunks - 1) / chunks;
  const dim3 grid(static_cast<unsigned>(col_blocks), static_cast<unsigned>((T + chunk_rows - 1) / chunk_rows));
  short_conv_backward_dw_kernel<<<grid, dim3(32, 8), 0, stream>>>(x_TC.data_as<__nv_bfloat16>(),
                                                                  dy_TC.data_as<__nv_bfloat16>(), T, C, K, chunk_rows,
                                                                  dw_CK.data_as<float>());
  QUILL_CUDA_CHECK_LAUNCH("short_conv_backward_dw_kernel");
  short_conv_backward_dx_kernel<<<elementwise_blocks(T * C), kThreads, 0, stream>>>(
      w_CK.data_as<float>(), dy_TC.data_as<__nv_bfloat16>(), T, C, K, dx_TC.data_as<__nv_bfloat16>());
  QUILL_CUDA_CHECK_LAUNCH("short_conv_backward_dx_kernel");
}

}  // namespace quill::cuda
