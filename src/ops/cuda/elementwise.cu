// Small element-wise ops on the GPU (ops/elementwise.h).
//
// Math:
//   copy:             dst = src                                   any dtype (bytes are copied)
//   add_inplace:      y += x                                      F32, BF16 or F64, one dtype
//   scale_inplace:    y *= s                                      F32, BF16 or F64; s taken as float (double for F64)
//   scale_by_scalar:  y = x * s[0]
//     backward:       dx = dy * s[0] (overwritten); ds[0] += sum(dy * x)
//   scale_rows:       y[n, :] = x[n, :] * s[n]
//     backward:       dx[n, :] = dy[n, :] * s[n] (overwritten); ds[n] = dy[n, :] . x[n, :] (overwritten)
//   sum_squares:      sum x^2, returned as double (synchronises the stream)
// Shapes: x, y, dx, dy [N, D] (any shape for scale_by_scalar); s_1, ds_1 [1]; s_N, ds_N [N].
// Dtypes (docs/decisions/cuda-precision.md): for the scale ops x, y, dy, dx are BF16 (or all F32)
// and s, ds are F32. Every element is widened to fp32 (fp64 for F64), combined once, and rounded
// once to the output dtype (round to nearest even). Reductions multiply in fp64 (exact for fp32
// and bf16 operands) and sum in fp64: per thread, then per block, then over the blocks' partials
// (a second launch, so the result does not depend on atomics and ds may alias s); scale_rows'
// per-row ds sums per lane, then over the row's lanes in a fixed shuffle tree (deterministic).
// Preconditions: contiguous tensors on the context's device. An output may be the same memory as
// an input of its shape (each element is read before the thread that reads it writes it), never
// a partial overlap. Loads are 16-byte vectors when every pointer involved is 16-byte aligned,
// element by element otherwise (row views can be misaligned).
#include "ops/cuda/bf16_units.cuh"
#include "ops/cuda/cuda_resources.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/tensor_checks.h"
#include "ops/dispatch.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

namespace quill::cuda {
namespace {

using ops_detail::require_dtype;
using ops_detail::require_shape;

using bf16 = uint16_t;  // bf16 bits, as quill stores them

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;
constexpr int kMaxReduceBlocks = 1024;

// ---------------------------------------------------------------------------------------------
// Device helpers: widening, rounding, packs of V elements, sums.

template <typename T>
using acc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

__device__ __forceinline__ float widen(float v) { return v; }
__device__ __forceinline__ float widen(bf16 v) { return __uint_as_float(static_cast<uint32_t>(v) << 16); }
__device__ __forceinline__ double widen(double v) { return v; }

template <typename T>
__device__ __forceinline__ T narrow(acc_t<T> v);
template <>
__device__ __forceinline__ float narrow<float>(float v) { return v; }
template <>
__device__ __forceinline__ bf16 narrow<bf16>(float v) { return __bfloat16_as_ushort(__float2bfloat16_rn(v)); }
template <>
__device__ __forceinline__ double narrow<double>(double v) { return v; }

template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

__device__ __forceinline__ double warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); the result is valid in thread 0.
__device__ double block_sum(double v) {
  __shared__ double warp_sums[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_sum(v);
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  v = threadIdx.x < (blockDim.x >> 5) ? warp_sums[threadIdx.x] : 0.0;
  if (warp == 0) v = warp_sum(v);
  return v;
}

__device__ __forceinline__ int64_t global_thread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_threads() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

// ---------------------------------------------------------------------------------------------
// Element-wise maps: out[i] = f(i, a[i], b[i]) in the widened type.

template <typename T, int V, typename F>
__global__ void map_kernel(T* out, const T* a, const T* b, int64_t n, F f) {
  const int64_t nv = n / V, stride = grid_threads();
  for (int64_t i = global_thread(); i < nv; i += stride) {
    const Pack<T, V> pa = reinterpret_cast<const Pack<T, V>*>(a)[i];
    const Pack<T, V> pb = reinterpret_cast<const Pack<T, V>*>(b)[i];
    Pack<T, V> po;
#pragma unroll
    for (int j = 0; j < V; ++j) po.v[j] = narrow<T>(f(i * V + j, widen(pa.v[j]), widen(pb.v[j])));
    reinterpret_cast<Pack<T, V>*>(out)[i] = po;
  }
  for (int64_t i = nv * V + global_thread(); i < n; i += stride) out[i] = narrow<T>(f(i, widen(a[i]), widen(b[i])));
}

template <typename A>
struct AddOp {
  __device__ A operator()(int64_t, A a, A b) const { return a + b; }
};
template <typename A>
struct ScaleOp {
  A s;
  __device__ A operator()(int64_t, A a, A) const { return a * s; }
};
// Multiplies by a scalar that lives on the device (a parameter's fp32 master).
struct ScaleByDeviceScalarOp {
  const float* s;
  __device__ float operator()(int64_t, float a, float) const { return a * __ldg(s); }
};

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

int blocks_for(int64_t items, int64_t max_blocks) {
  return static_cast<int>(std::clamp<int64_t>((items + kThreads - 1) / kThreads, 1, max_blocks));
}

template <typename T, typename F>
void launch_map(const DeviceContext& ctx, const char* name, T* out, const T* a, const T* b, int64_t n, F f) {
  if (n == 0) return;
  constexpr int V = 16 / sizeof(T);
  if (aligned16(out) && aligned16(a) && aligned16(b)) {
    map_kernel<T, V, F><<<blocks_for(n / V + 1, kMaxBlocks), kThreads, 0, stream_of(ctx)>>>(out, a, b, n, f);
  } else {
    map_kernel<T, 1, F><<<blocks_for(n, kMaxBlocks), kThreads, 0, stream_of(ctx)>>>(out, a, b, n, f);
  }
  QUILL_CUDA_CHECK_LAUNCH(name);
}

// ---------------------------------------------------------------------------------------------
// Reductions.

// dx = dy * s; partial[block] = sum over the block's elements of dy * x (fp64).
template <typename T, int V>
__global__ void scale_by_scalar_backward_kernel(const T* x, const float* s, const T* dy, T* dx, int64_t n,
                                                double* partial) {
  const float sv = *s;
  const int64_t nv = n / V, stride = grid_threads();
  double acc = 0;
  for (int64_t i = global_thread(); i < nv; i += stride) {
    const Pack<T, V> px = reinterpret_cast<const Pack<T, V>*>(x)[i];
    const Pack<T, V> pdy = reinterpret_cast<const Pack<T, V>*>(dy)[i];
    Pack<T, V> pdx;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const float g = widen(pdy.v[j]);
      acc += static_cast<double>(g) * static_cast<double>(widen(px.v[j]));
      pdx.v[j] = narrow<T>(g * sv);
    }
    reinterpret_cast<Pack<T, V>*>(dx)[i] = pdx;
  }
  for (int64_t i = nv * V + global_thread(); i < n; i += stride) {
    const float g = widen(dy[i]);
    acc += static_cast<double>(g) * static_cast<double>(widen(x[i]));
    dx[i] = narrow<T>(g * sv);
  }
  acc = block_sum(acc);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

// partial[block] = sum over the block's elements of x^2 (fp64).
template <typename T, int V>
__global__ void sum_squares_kernel(const T* x, int64_t n, double* partial) {
  const int64_t nv = n / V, stride = grid_threads();
  double acc = 0;
  for (int64_t i = global_thread(); i < nv; i += stride) {
    const Pack<T, V> px = reinterpret_cast<const Pack<T, V>*>(x)[i];
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const double v = widen(px.v[j]);
      acc += v * v;
    }
  }
  for (int64_t i = nv * V + global_thread(); i < n; i += stride) {
    const double v = widen(x[i]);
    acc += v * v;
  }
  acc = block_sum(acc);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

// One block sums the partials; ds_f32 (when given) gets ds += float(total), total_f64 (when given)
// gets the total.
__global__ void finish_sum_kernel(const double* partial, int count, float* ds_f32, double* total_f64) {
  double acc = 0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) acc += partial[i];
  acc = block_sum(acc);
  if (threadIdx.x == 0) {
    if (ds_f32) *ds_f32 = *ds_f32 + static_cast<float>(acc);
    if (total_f64) *total_f64 = acc;
  }
}

// Scratch for the partial sums, stream-ordered (freed on the stream after its last use).
class StreamScratch {
 public:
  StreamScratch(cudaStream_t stream, size_t bytes) : stream_(stream) {
    QUILL_CUDA_CHECK(cudaMallocAsync(&ptr_, bytes, stream));
  }
  ~StreamScratch() { cudaFreeAsync(ptr_, stream_); }
  StreamScratch(const StreamScratch&) = delete;
  StreamScratch& operator=(const StreamScratch&) = delete;
  double* doubles() const { return static_cast<double*>(ptr_); }

 private:
  cudaStream_t stream_;
  void* ptr_ = nullptr;
};

// ---------------------------------------------------------------------------------------------
// Row scaling. A row of D elements is D / V units of V elements (one 16-byte Pack when V > 1). A
// group of G lanes (a power of two <= 32, no wider than the row's units) owns a row; lane k of the
// group takes the row's units k, k + G, ... , kRowUnits of them per trip with every load of the
// trip issued before its stores (bytes in flight); a warp holds 32 / G rows at a time. One resident
// wave of blocks strides over the rows. No division per element (the map kernel's ScaleRowsOp
// divided each element's index by D in 64 bits).

constexpr int kRowUnits = 4;

int row_group(int64_t units_per_row) {
  int g = 1;
  while (g < 32 && g < units_per_row) g *= 2;
  return g;
}

// y[n, :] = x[n, :] * s[n].
template <typename T, int V>
__global__ void __launch_bounds__(kThreads) scale_rows_kernel(const T* x, const float* s, int64_t N, int64_t D, int G,
                                                              T* y) {
  const int lane = threadIdx.x & 31, k = lane & (G - 1), R = 32 / G;
  const int64_t units = D / V, warps = grid_threads() >> 5;
  for (int64_t n = (global_thread() >> 5) * R + lane / G; n < N; n += warps * R) {
    const float sn = s[n];
    const Pack<T, V>* xr = reinterpret_cast<const Pack<T, V>*>(x + n * D);
    Pack<T, V>* yr = reinterpret_cast<Pack<T, V>*>(y + n * D);
#pragma unroll 1
    for (int64_t u = k; u < units; u += int64_t(G) * kRowUnits) {
      Pack<T, V> px[kRowUnits];
#pragma unroll
      for (int i = 0; i < kRowUnits; ++i)
        if (u + i * G < units) px[i] = xr[u + i * G];
#pragma unroll
      for (int i = 0; i < kRowUnits; ++i) {
        if (u + i * G >= units) break;
        Pack<T, V> py;
#pragma unroll
        for (int j = 0; j < V; ++j) py.v[j] = narrow<T>(widen(px[i].v[j]) * sn);
        yr[u + i * G] = py;
      }
    }
  }
}

// dx[n, :] = dy[n, :] * s[n]; ds[n] = dy[n, :] . x[n, :] (products and sums in fp64, stored as
// fp32): each lane sums its units in order, then the group adds its lanes' sums in a fixed tree.
// s[n] is read only by the group's lane 0, the lane that writes ds[n] after it (ds may alias s),
// and passed to the group by a shuffle. The row loop is warp-uniform (every lane takes part in the
// shuffles).
template <typename T, int V>
__global__ void __launch_bounds__(kThreads) scale_rows_backward_kernel(const T* x, const float* s, const T* dy,
                                                                       int64_t N, int64_t D, int G, T* dx, float* ds) {
  const int lane = threadIdx.x & 31, k = lane & (G - 1), R = 32 / G;
  const int64_t units = D / V, warps = grid_threads() >> 5;
  for (int64_t base = (global_thread() >> 5) * R; base < N; base += warps * R) {
    const int64_t n = base + lane / G;
    const bool live = n < N;
    float sn = live && k == 0 ? s[n] : 0.0f;
    sn = __shfl_sync(0xffffffffu, sn, 0, G);
    double acc = 0;
    if (live) {
      const Pack<T, V>* xr = reinterpret_cast<const Pack<T, V>*>(x + n * D);
      const Pack<T, V>* dyr = reinterpret_cast<const Pack<T, V>*>(dy + n * D);
      Pack<T, V>* dxr = reinterpret_cast<Pack<T, V>*>(dx + n * D);
#pragma unroll 1
      for (int64_t u = k; u < units; u += int64_t(G) * kRowUnits) {
        Pack<T, V> px[kRowUnits], pdy[kRowUnits];
#pragma unroll
        for (int i = 0; i < kRowUnits; ++i)
          if (u + i * G < units) {
            px[i] = xr[u + i * G];
            pdy[i] = dyr[u + i * G];
          }
        // Every load of this trip is above: with dx aliasing x or dy, the stores below overwrite
        // only what this lane has already read.
#pragma unroll
        for (int i = 0; i < kRowUnits; ++i) {
          if (u + i * G >= units) break;
          Pack<T, V> pdx;
#pragma unroll
          for (int j = 0; j < V; ++j) {
            const float g = widen(pdy[i].v[j]);
            acc += static_cast<double>(g) * static_cast<double>(widen(px[i].v[j]));
            pdx.v[j] = narrow<T>(g * sn);
          }
          dxr[u + i * G] = pdx;
        }
      }
    }
    for (int o = G / 2; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (live && k == 0) ds[n] = static_cast<float>(acc);
  }
}

// ---------------------------------------------------------------------------------------------
// Validation and dtype dispatch.

// Calls fn(T{}) with T = float, bf16 or double from the dtype of `t`; kAllowF64 adds F64.
template <bool kAllowF64, typename Fn>
void dispatch(const char* op, const char* name, const Tensor& t, Fn&& fn) {
  if (t.dtype() == DType::F32) return fn(float{});
  if (t.dtype() == DType::BF16) return fn(bf16{});
  if constexpr (kAllowF64) {
    if (t.dtype() == DType::F64) return fn(double{});
  }
  QUILL_FAIL("{}: {} has dtype {}, expected BF16 or F32{}", op, name, dtype_name(t.dtype()),
             kAllowF64 ? " or F64" : "");
}

template <typename T>
T* ptr(const Tensor& t) {
  return static_cast<T*>(t.data());
}

// Launchers (templates so that each kernel launch is a plain template instantiation).
template <typename T>
void add_impl(const DeviceContext& ctx, const Tensor& y, const Tensor& x) {
  launch_map(ctx, "add_inplace", ptr<T>(y), ptr<const T>(y), ptr<const T>(x), y.numel(), AddOp<acc_t<T>>{});
}

template <typename T>
void scale_impl(const DeviceContext& ctx, const Tensor& y, double s) {
  launch_map(ctx, "scale_inplace", ptr<T>(y), ptr<const T>(y), ptr<const T>(y), y.numel(),
             ScaleOp<acc_t<T>>{static_cast<acc_t<T>>(s)});
}

template <typename T>
void scale_by_scalar_impl(const DeviceContext& ctx, const Tensor& x, const Tensor& s_1, const Tensor& y) {
  launch_map(ctx, "scale_by_scalar", ptr<T>(y), ptr<const T>(x), ptr<const T>(x), x.numel(),
             ScaleByDeviceScalarOp{ptr<const float>(s_1)});
}

// One resident wave of kThreads-thread blocks for a row kernel with groups of G lanes (kThreads / G
// rows per block at a time), no more than the N rows need.
template <typename Kernel>
unsigned row_blocks(const DeviceContext& ctx, Kernel kernel, int64_t N, int G) {
  return units::resident_blocks(kernel, kThreads, 0, ctx.cuda->device, units::ceil_div(N, kThreads / G));
}

template <typename T, int V>
void launch_scale_rows(const DeviceContext& ctx, const Tensor& x_ND, const Tensor& s_N, const Tensor& y_ND) {
  const int64_t N = x_ND.dim(0), D = x_ND.dim(1);
  const int G = row_group(D / V);
  scale_rows_kernel<T, V><<<row_blocks(ctx, scale_rows_kernel<T, V>, N, G), kThreads, 0, stream_of(ctx)>>>(
      ptr<const T>(x_ND), ptr<const float>(s_N), N, D, G, ptr<T>(y_ND));
}

template <typename T>
void scale_rows_impl(const DeviceContext& ctx, const Tensor& x_ND, const Tensor& s_N, const Tensor& y_ND) {
  if (x_ND.numel() == 0) return;
  constexpr int V = 16 / sizeof(T);
  if (x_ND.dim(1) % V == 0 && aligned16(x_ND.data()) && aligned16(y_ND.data()))
    launch_scale_rows<T, V>(ctx, x_ND, s_N, y_ND);
  else
    launch_scale_rows<T, 1>(ctx, x_ND, s_N, y_ND);
  QUILL_CUDA_CHECK_LAUNCH("scale_rows");
}

template <typename T>
void scale_by_scalar_backward_impl(const DeviceContext& ctx, const Tensor& x, const Tensor& s_1, const Tensor& dy,
                                   const Tensor& dx, const Tensor& ds_1) {
  const int64_t n = x.numel();
  constexpr int V = 16 / sizeof(T);
  const bool vec = aligned16(x.data()) && aligned16(dy.data()) && aligned16(dx.data());
  const int blocks = blocks_for(vec ? n / V + 1 : n, kMaxReduceBlocks);
  StreamScratch partial(stream_of(ctx), blocks * sizeof(double));
  if (vec)
    scale_by_scalar_backward_kernel<T, V><<<blocks, kThreads, 0, stream_of(ctx)>>>(
        ptr<const T>(x), ptr<const float>(s_1), ptr<const T>(dy), ptr<T>(dx), n, partial.doubles());
  else
    scale_by_scalar_backward_kernel<T, 1><<<blocks, kThreads, 0, stream_of(ctx)>>>(
        ptr<const T>(x), ptr<const float>(s_1), ptr<const T>(dy), ptr<T>(dx), n, partial.doubles());
  QUILL_CUDA_CHECK_LAUNCH("scale_by_scalar_backward");
  finish_sum_kernel<<<1, 1024, 0, stream_of(ctx)>>>(partial.doubles(), blocks, ptr<float>(ds_1), nullptr);
  QUILL_CUDA_CHECK_LAUNCH("scale_by_scalar_backward (sum)");
}

template <typename T, int V>
void launch_scale_rows_backward(const DeviceContext& ctx, const Tensor& x_ND, const Tensor& s_N, const Tensor& dy_ND,
                                const Tensor& dx_ND, const Tensor& ds_N) {
  const int64_t N = x_ND.dim(0), D = x_ND.dim(1);
  const int G = row_group(D / V);
  scale_rows_backward_kernel<T, V>
      <<<row_blocks(ctx, scale_rows_backward_kernel<T, V>, N, G), kThreads, 0, stream_of(ctx)>>>(
          ptr<const T>(x_ND), ptr<const float>(s_N), ptr<const T>(dy_ND), N, D, G, ptr<T>(dx_ND), ptr<float>(ds_N));
}

template <typename T>
void scale_rows_backward_impl(const DeviceContext& ctx, const Tensor& x_ND, const Tensor& s_N, const Tensor& dy_ND,
                              const Tensor& dx_ND, const Tensor& ds_N) {
  if (x_ND.dim(0) == 0) return;  // D == 0 still writes ds = 0
  constexpr int V = 16 / sizeof(T);
  if (x_ND.dim(1) % V == 0 && aligned16(x_ND.data()) && aligned16(dy_ND.data()) && aligned16(dx_ND.data()))
    launch_scale_rows_backward<T, V>(ctx, x_ND, s_N, dy_ND, dx_ND, ds_N);
  else
    launch_scale_rows_backward<T, 1>(ctx, x_ND, s_N, dy_ND, dx_ND, ds_N);
  QUILL_CUDA_CHECK_LAUNCH("scale_rows_backward");
}

template <typename T>
double sum_squares_impl(const DeviceContext& ctx, const Tensor& x) {
  const int64_t n = x.numel();
  if (n == 0) return 0.0;
  constexpr int V = 16 / sizeof(T);
  const bool vec = aligned16(x.data());
  const int blocks = blocks_for(vec ? n / V + 1 : n, kMaxReduceBlocks);
  StreamScratch scratch(stream_of(ctx), (blocks + 1) * sizeof(double));
  double* total = scratch.doubles() + blocks;
  if (vec)
    sum_squares_kernel<T, V><<<blocks, kThreads, 0, stream_of(ctx)>>>(ptr<const T>(x), n, scratch.doubles());
  else
    sum_squares_kernel<T, 1><<<blocks, kThreads, 0, stream_of(ctx)>>>(ptr<const T>(x), n, scratch.doubles());
  QUILL_CUDA_CHECK_LAUNCH("sum_squares");
  finish_sum_kernel<<<1, 1024, 0, stream_of(ctx)>>>(scratch.doubles(), blocks, nullptr, total);
  QUILL_CUDA_CHECK_LAUNCH("sum_squares (sum)");
  double result = 0;
  QUILL_CUDA_CHECK(cudaMemcpyAsync(&result, total, sizeof(double), cudaMemcpyDeviceToHost, stream_of(ctx)));
  QUILL_CUDA_CHECK(cudaStreamSynchronize(stream_of(ctx)));
  return result;
}

}  // namespace

// ---------------------------------------------------------------------------------------------

void copy(const DeviceContext& ctx, const Tensor& src, const Tensor& dst) {
  const char* op = "copy";
  QUILL_CHECK(src.defined(), "{}: src is undefined", op);
  require_shape(op, "dst", dst, src.shape());
  require_dtype(op, "dst", dst, src.dtype());
  require_cuda(op, "src", src);
  require_cuda(op, "dst", dst);
  if (src.nbytes() == 0 || src.data() == dst.data()) return;
  QUILL_CUDA_CHECK(
      cudaMemcpyAsync(dst.data(), src.data(), src.nbytes(), cudaMemcpyDeviceToDevice, stream_of(ctx)));
}

void add_inplace(const DeviceContext& ctx, const Tensor& y, const Tensor& x) {
  const char* op = "add_inplace";
  QUILL_CHECK(y.defined(), "{}: y is undefined", op);
  require_shape(op, "x", x, y.shape());
  require_dtype(op, "x", x, y.dtype());
  require_cuda(op, "y", y);
  require_cuda(op, "x", x);
  dispatch<true>(op, "y", y, [&](auto tag) { add_impl<decltype(tag)>(ctx, y, x); });
}

void scale_inplace(const DeviceContext& ctx, const Tensor& y, double s) {
  const char* op = "scale_inplace";
  QUILL_CHECK(y.defined(), "{}: y is undefined", op);
  require_cuda(op, "y", y);
  dispatch<true>(op, "y", y, [&](auto tag) { scale_impl<decltype(tag)>(ctx, y, s); });
}

void scale_by_scalar(const DeviceContext& ctx, const Tensor& x, const Tensor& s_1, const Tensor& y) {
  const char* op = "scale_by_scalar";
  QUILL_CHECK(x.defined(), "{}: x is undefined", op);
  require_shape(op, "s", s_1, {1});
  require_shape(op, "y", y, x.shape());
  require_dtype(op, "s", s_1, DType::F32);
  require_dtype(op, "y", y, x.dtype());
  require_cuda(op, "x", x);
  require_cuda(op, "s", s_1);
  require_cuda(op, "y", y);
  dispatch<false>(op, "x", x, [&](auto tag) { scale_by_scalar_impl<decltype(tag)>(ctx, x, s_1, y); });
}

void scale_by_scalar_backward(const DeviceContext& ctx, const Tensor& x, const Tensor& s_1, const Tensor& dy,
                              const Tensor& dx, const Tensor& ds_1) {
  const char* op = "scale_by_scalar_backward";
  QUILL_CHECK(x.defined(), "{}: x is undefined", op);
  require_shape(op, "s", s_1, {1});
  require_shape(op, "dy", dy, x.shape());
  require_shape(op, "dx", dx, x.shape());
  require_shape(op, "ds", ds_1, {1});
  require_dtype(op, "s", s_1, DType::F32);
  require_dtype(op, "dy", dy, x.dtype());
  require_dtype(op, "dx", dx, x.dtype());
  require_dtype(op, "ds", ds_1, DType::F32);
  for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"x", &x}, {"s", &s_1}, {"dy", &dy},
                                {"dx", &dx}, {"ds", &ds_1}})
    require_cuda(op, name, *t);
  dispatch<false>(op, "x", x,
           [&](auto tag) { scale_by_scalar_backward_impl<decltype(tag)>(ctx, x, s_1, dy, dx, ds_1); });
}

void scale_rows(const DeviceContext& ctx, const Tensor& x_ND, const Tensor& s_N, const Tensor& y_ND) {
  const char* op = "scale_rows";
  QUILL_CHECK(x_ND.defined() && x_ND.ndim() == 2, "{}: x must be 2-D [N, D], got {}", op,
              x_ND.defined() ? x_ND.describe() : std::string("(undefined)"));
  const int64_t N = x_ND.dim(0), D = x_ND.dim(1);
  require_shape(op, "s", s_N, {N});
  require_shape(op, "y", y_ND, {N, D});
  require_dtype(op, "s", s_N, DType::F32);
  require_dtype(op, "y", y_ND, x_ND.dtype());
  require_cuda(op, "x", x_ND);
  require_cuda(op, "s", s_N);
  require_cuda(op, "y", y_ND);
  dispatch<false>(op, "x", x_ND, [&](auto tag) { scale_rows_impl<decltype(tag)>(ctx, x_ND, s_N, y_ND); });
}

void scale_rows_backward(const DeviceContext& ctx, const Tensor& x_ND, const Tensor& s_N, const Tensor& dy_ND,
                         const Tensor& dx_ND, const Tensor& ds_N) {
  const char* op = "scale_rows_backward";
  QUILL_CHECK(x_ND.defined() && x_ND.ndim() == 2, "{}: x must be 2-D [N, D], got {}", op,
              x_ND.defined() ? x_ND.describe() : std::string("(undefined)"));
  const int64_t N = x_ND.dim(0), D = x_ND.dim(1);
  require_shape(op, "s", s_N, {N});
  require_shape(op, "dy", dy_ND, {N, D});
  require_shape(op, "dx", dx_ND, {N, D});
  require_shape(op, "ds", ds_N, {N});
  require_dtype(op, "s", s_N, DType::F32);
  require_dtype(op, "dy", dy_ND, x_ND.dtype());
  require_dtype(op, "dx", dx_ND, x_ND.dtype());
  require_dtype(op, "ds", ds_N, DType::F32);
  for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"x", &x_ND}, {"s", &s_N}, {"dy", &dy_ND},
                                {"dx", &dx_ND}, {"ds", &ds_N}})
    require_cuda(op, name, *t);
  dispatch<false>(op, "x", x_ND,
           [&](auto tag) { scale_rows_backward_impl<decltype(tag)>(ctx, x_ND, s_N, dy_ND, dx_ND, ds_N); });
}

double sum_squares(const DeviceContext& ctx, const Tensor& x) {
  const char* op = "sum_squares";
  QUILL_CHECK(x.defined(), "{}: x is undefined", op);
  require_cuda(op, "x", x);
  double result = 0;
  dispatch<true>(op, "x", x, [&](auto tag) { result = sum_squares_impl<decltype(tag)>(ctx, x); });
  return result;
}

}  // namespace quill::cuda
