// Element-type conversion, zeroing and host/device transfers on the GPU (ops/convert.h).
//
// Math: convert: dst[i] = src[i] in dst's dtype; zero: every byte of t = 0; transfer: dst = src.
// Shapes: src and dst of one shape.
// Dtypes: convert between F32, BF16 and F64 in any direction (the same dtype is a copy). A
// narrowing goes through fp32 exactly as the CPU reference does: F64 -> F32 rounds to nearest,
// F32 -> BF16 rounds to nearest even (NaN stays NaN); widenings are exact. zero and transfer take
// any dtype (transfer needs the same dtype on both sides).
// Preconditions: convert and zero work on tensors of the context's device, asynchronously on its
// stream; convert's src and dst are the same memory (same dtype only) or do not overlap. transfer
// copies host -> device, device -> host, device -> device or host -> host (host memory pageable or
// pinned) in the context's stream order and returns when the copy is done.
#include "ops/cuda/cuda_resources.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/tensor_checks.h"
#include "ops/dispatch.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

namespace quill::cuda {
namespace {

using ops_detail::require_dtype;
using ops_detail::require_shape;

using bf16 = uint16_t;  // bf16 bits, as quill stores them

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;

template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

// Conversions matching ops/cpu/convert.cc: to bf16 from fp32 (from fp64 through fp32 first).
template <typename D>
__device__ __forceinline__ D cvt(float v);
template <typename D>
__device__ __forceinline__ D cvt(double v);
template <typename D>
__device__ __forceinline__ D cvt(bf16 v) {
  return cvt<D>(__uint_as_float(static_cast<uint32_t>(v) << 16));
}
template <>
__device__ __forceinline__ float cvt<float>(float v) { return v; }
template <>
__device__ __forceinline__ double cvt<double>(float v) { return v; }
template <>
__device__ __forceinline__ bf16 cvt<bf16>(float v) { return __bfloat16_as_ushort(__float2bfloat16_rn(v)); }
template <>
__device__ __forceinline__ float cvt<float>(double v) { return static_cast<float>(v); }
template <>
__device__ __forceinline__ double cvt<double>(double v) { return v; }
template <>
__device__ __forceinline__ bf16 cvt<bf16>(double v) { return cvt<bf16>(static_cast<float>(v)); }

template <typename S, typename D, int V>
__global__ void convert_kernel(const S* src, D* dst, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t nv = n / V;
  for (int64_t i = tid; i < nv; i += stride) {
    const Pack<S, V> ps = reinterpret_cast<const Pack<S, V>*>(src)[i];
    Pack<D, V> pd;
#pragma unroll
    for (int j = 0; j < V; ++j) pd.v[j] = cvt<D>(ps.v[j]);
    reinterpret_cast<Pack<D, V>*>(dst)[i] = pd;
  }
  for (int64_t i = nv * V + tid; i < n; i += stride) dst[i] = cvt<D>(src[i]);
}

bool aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

int blocks_for(int64_t items) {
  return static_cast<int>(std::clamp<int64_t>((items + kThreads - 1) / kThreads, 1, kMaxBlocks));
}

template <typename S, typename D>
void launch_convert(const DeviceContext& ctx, const Tensor& src, const Tensor& dst) {
  const int64_t n = src.numel();
  if (n == 0) return;
  // V elements per step: 16 bytes of the wider type.
  constexpr int V = 16 / (sizeof(S) > sizeof(D) ? sizeof(S) : sizeof(D));
  const S* s = static_cast<const S*>(src.data());
  D* d = static_cast<D*>(dst.data());
  if (aligned(s, sizeof(S) * V) && aligned(d, sizeof(D) * V))
    convert_kernel<S, D, V><<<blocks_for(n / V + 1), kThreads, 0, stream_of(ctx)>>>(s, d, n);
  else
    convert_kernel<S, D, 1><<<blocks_for(n), kThreads, 0, stream_of(ctx)>>>(s, d, n);
  QUILL_CUDA_CHECK_LAUNCH("convert");
}

template <typename S>
void convert_from(const DeviceContext& ctx, const Tensor& src, const Tensor& dst) {
  switch (dst.dtype()) {
    case DType::F32: return launch_convert<S, float>(ctx, src, dst);
    case DType::BF16: return launch_convert<S, bf16>(ctx, src, dst);
    case DType::F64: return launch_convert<S, double>(ctx, src, dst);
    default: QUILL_FAIL("convert: dst has dtype {}, expected F32, BF16 or F64", dtype_name(dst.dtype()));
  }
}

}  // namespace

void convert(const DeviceContext& ctx, const Tensor& src, const Tensor& dst) {
  const char* op = "convert";
  QUILL_CHECK(src.defined(), "{}: src is undefined", op);
  require_shape(op, "dst", dst, src.shape());
  require_cuda(op, "src", src);
  require_cuda(op, "dst", dst);
  if (src.dtype() == dst.dtype()) {
    if (src.nbytes() && src.data() != dst.data())
      QUILL_CUDA_CHECK(
          cudaMemcpyAsync(dst.data(), src.data(), src.nbytes(), cudaMemcpyDeviceToDevice, stream_of(ctx)));
    return;
  }
  switch (src.dtype()) {
    case DType::F32: return convert_from<float>(ctx, src, dst);
    case DType::BF16: return convert_from<bf16>(ctx, src, dst);
    case DType::F64: return convert_from<double>(ctx, src, dst);
    default: QUILL_FAIL("{}: src has dtype {}, expected F32, BF16 or F64", op, dtype_name(src.dtype()));
  }
}

void zero(const DeviceContext& ctx, const Tensor& t) {
  QUILL_CHECK(t.defined(), "zero: the tensor is undefined");
  require_cuda("zero", "t", t);
  if (t.nbytes()) QUILL_CUDA_CHECK(cudaMemsetAsync(t.data(), 0, t.nbytes(), stream_of(ctx)));
}

namespace {
// The arguments of a transfer: src defined, dst of its shape and dtype. False when there is nothing
// to copy (empty, or the same memory).
bool transfer_needed(const char* op, const Tensor& src, const Tensor& dst) {
  QUILL_CHECK(src.defined(), "{}: src is undefined", op);
  require_shape(op, "dst", dst, src.shape());
  require_dtype(op, "dst", dst, src.dtype());
  return src.nbytes() != 0 && src.data() != dst.data();
}
}  // namespace

void transfer(const DeviceContext& ctx, const Tensor& src, const Tensor& dst) {
  if (!transfer_needed("transfer", src, dst)) return;
  const bool from_device = src.device() == Device::CUDA, to_device = dst.device() == Device::CUDA;
  if (!from_device && !to_device) {  // host to host: nothing on the stream can touch host tensors
    std::memcpy(dst.data(), src.data(), src.nbytes());
    return;
  }
  const cudaMemcpyKind kind = from_device ? (to_device ? cudaMemcpyDeviceToDevice : cudaMemcpyDeviceToHost)
                                          : cudaMemcpyHostToDevice;
  // In stream order, so the copy sees every earlier op's result and later ops see the copy.
  QUILL_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), src.nbytes(), kind, stream_of(ctx)));
  QUILL_CUDA_CHECK(cudaStreamSynchronize(stream_of(ctx)));
}

namespace {
// An event recorded on `recorded` that `waiter` then waits for; destroyed at once (CUDA keeps it
// until the wait is resolved).
void order_after(cudaStream_t waiter, cudaStream_t recorded) {
  cudaEvent_t e;
  QUILL_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  QUILL_CUDA_CHECK(cudaEventRecord(e, recorded));
  QUILL_CUDA_CHECK(cudaStreamWaitEvent(waiter, e, 0));
  QUILL_CUDA_CHECK(cudaEventDestroy(e));
}
}  // namespace

void transfer_async(const DeviceContext& ctx, const Tensor& src, const Tensor& dst) {
  const char* op = "transfer_async";
  if (!transfer_needed(op, src, dst)) return;
  const bool from_device = src.device() == Device::CUDA, to_device = dst.device() == Device::CUDA;
  QUILL_CHECK(from_device != to_device, "{}: one of the tensors must be on the device, the other on the host", op);
  order_after(copy_stream_of(ctx), stream_of(ctx));  // the copy sees every op enqueued so far
  QUILL_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), src.nbytes(),
                                   from_device ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice, copy_stream_of(ctx)));
}

void wait_transfers(const DeviceContext& ctx, bool host) {
  order_after(stream_of(ctx), copy_stream_of(ctx));
  if (host) QUILL_CUDA_CHECK(cudaStreamSynchronize(copy_stream_of(ctx)));
}

ops::TransferFence transfer_fence(const DeviceContext& ctx) {
  cudaEvent_t e;
  QUILL_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  ops::TransferFence fence;
  fence.event = std::shared_ptr<void>(e, [](void* ev) { cudaEventDestroy(static_cast<cudaEvent_t>(ev)); });
  QUILL_CUDA_CHECK(cudaEventRecord(e, copy_stream_of(ctx)));
  return fence;
}

void bind_host_thread(const DeviceContext& ctx) { QUILL_CUDA_CHECK(cudaSetDevice(ctx.cuda->device)); }

void wait_transfer_fence(const DeviceContext& ctx, const ops::TransferFence& fence) {
  (void)ctx;
  QUILL_CHECK(fence.event != nullptr, "wait_transfer_fence: the fence was not made by transfer_fence on a GPU");
  QUILL_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(fence.event.get())));
}

}  // namespace quill::cuda
