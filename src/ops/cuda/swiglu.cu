// CUDA SwiGLU on the split layout h = [gate | up] (ops/swiglu.h; dtypes: docs/decisions/cuda-precision.md).
//   forward:  a[n, f] = silu(g) * u,   g = h[n, f], u = h[n, F + f],  silu(g) = g * sigmoid(g)
//   backward: dh[n, f]     = da[n, f] * u * sigmoid(g) * (1 + g * (1 - sigmoid(g)))   (overwritten)
//             dh[n, F + f] = da[n, f] * silu(g)
// Legend: N rows, F intermediate width. h_N2F, dh_N2F BF16 [N, 2F]; a_NF, da_NF BF16 [N, F]; fp32 math.
// One thread per (n, f) pair, so dh may alias h (a thread reads g and u before writing their gradients).
#include <algorithm>
#include <string>

#include "ops/cuda/cuda_resources.h"
#include "ops/cuda/kernels.h"
#include "ops/dispatch.h"

namespace quill::cuda {
namespace {

using ops_detail::require_dtype;
using ops_detail::require_shape;

constexpr int kThreads = 256;

void require_device(const char* op, const char* name, const Tensor& t) {
  QUILL_CHECK(t.defined() && t.device() == Device::CUDA, "{}: {} must be in GPU memory, got {}", op, name,
              t.defined() ? t.describe() : std::string("(undefined)"));
}

__device__ __forceinline__ float sigmoid_f32(float g) { return 1.0f / (1.0f + expf(-g)); }

__global__ void swiglu_forward_kernel(const __nv_bfloat16* h, int64_t N, int64_t F, __nv_bfloat16* a) {
  const int64_t total = N * F;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = i / F, f = i - n * F;
    const float g = __bfloat162float(h[n * 2 * F + f]);
    const float u = __bfloat162float(h[n * 2 * F + F + f]);
    a[i] = __float2bfloat16(g * sigmoid_f32(g) * u);
  }
}

__global__ void swiglu_backward_kernel(const __nv_bfloat16* h, const __nv_bfloat16* da, int64_t N, int64_t F,
                                       __nv_bfloat16* dh) {
  const int64_t total = N * F;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = i / F, f = i - n * F;
    const int64_t gi = n * 2 * F + f, ui = gi + F;
    const float g = __bfloat162float(h[gi]), u = __bfloat162float(h[ui]), d = __bfloat162float(da[i]);
    const float s = sigmoid_f32(g);
    dh[gi] = __float2bfloat16(d * u * s * (1.0f + g * (1.0f - s)));
    dh[ui] = __float2bfloat16(d * g * s);
  }
}

void check_h(const char* op, const char* name, const Tensor& t) {
  QUILL_CHECK(t.defined() && t.ndim() == 2 && t.dim(1) % 2 == 0, "{}: {} must be 2-D [N, 2F], got {}", op, name,
              t.defined() ? t.describe() : std::string("(undefined)"));
  require_dtype(op, name, t, DType::BF16);
  require_device(op, name, t);
}

unsigned elementwise_blocks(int64_t n) {
  return static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, 132 * 32));
}

}  // namespace

void swiglu_forward(const DeviceContext& ctx, const Tensor& h_N2F, const Tensor& a_NF) {
  const char* op = "swiglu_forward";
  check_h(op, "h", h_N2F);
  const int64_t N = h_N2F.dim(0), F = h_N2F.dim(1) / 2;
  require_shape(op, "a", a_NF, {N, F});
  require_dtype(op, "a", a_NF, DType::BF16);
  require_device(op, "a", a_NF);
  if (N * F == 0) return;
  swiglu_forward_kernel<<<elementwise_blocks(N * F), kThreads, 0, stream_of(ctx)>>>(h_N2F.data_as<__nv_bfloat16>(), N,
                                                                                     F, a_NF.data_as<__nv_bfloat16>());
  QUILL_CUDA_CHECK_LAUNCH("swiglu_forward_kernel");
}

void swiglu_backward(const DeviceContext& ctx, const Tensor& h_N2F, const Tensor& da_NF, const Tensor& dh_N2F) {
  const char* op = "swiglu_backward";
  check_h(op, "h", h_N2F);
  const int64_t N = h_N2F.dim(0), F = h_N2F.dim(1) / 2;
  require_shape(op, "da", da_NF, {N, F});
  require_shape(op, "dh", dh_N2F, {N, 2 * F});
  require_dtype(op, "da", da_NF, DType::BF16);
  require_dtype(op, "dh", dh_N2F, DType::BF16);
  require_device(op, "da", da_NF);
  require_device(op, "dh", dh_N2F);
  if (N * F == 0) return;
  swiglu_backward_kernel<<<elementwise_blocks(N * F), kThreads, 0, stream_of(ctx)>>>(
      h_N2F.data_as<__nv_bfloat16>(), da_NF.data_as<__nv_bfloat16>(), N, F, dh_N2F.data_as<__nv_bfloat16>());
  QUILL_CUDA_CHECK_LAUNCH("swiglu_backward_kernel");
}

}  // namespace quill::cuda
