// CUDA depthwise causal short convolution with residual (ops/short_conv.h; dtypes:
// docs/decisions/cuda-precision.md).
//   forward:  y[t, c] = x[t, c] + sum_{j<K} w[c, j] * x[t - (K-1) + j, c]       (x[negative] = 0)
//   backward: dx[s, c] = dy[s, c] + sum_{j<K} w[c, j] * dy[s + (K-1) - j, c]   (dy[>= T] = 0; overwritten)
//             dw[c, j] += sum_t dy[t, c] * x[t - (K-1) + j, c]                  (accumulated)
// Legend: T positions of one sequence, C channels, K taps (1..kMaxTaps; Inkling uses 4).
// Dtypes: x_TC, y_TC, dy_TC, dx_TC BF16 [T, C]; w_CK, dw_CK F32 [C, K]. All arithmetic fp32, taps
// added in j order as the CPU reference does.
// Layout: when C % 8 == 0 and the tensors are 16-byte aligned, the vectorised kernels below (8
// channels and a run of positions per thread, a sliding window of rows in registers, dx and dw in one
// pass). Otherwise one thread per output element (consecutive threads on consecutive channels, so
// every tap read is coalesced); dw is a reduction over T: blocks of 32 channels x a chunk of positions
// reduce in shared memory, then one fp32 atomicAdd per (channel, tap) and block.
// y must not alias x, nor dx alias dy or x (outputs are written while neighbours are still read).
#include <algorithm>
#include <cstdint>
#include <initializer_list>
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

// ---- Vectorised path: C % 8 == 0 and 16-byte aligned tensors (every Inkling projection). ----
// A thread owns 8 channels (one 16-byte load per row) and a run of consecutive positions, keeping the
// last K rows it read in registers, so each element is read once instead of K times, and w's taps
// for its channels stay in registers. Same tap order (and so the same fp32 results) as the scalar
// kernels for y and dx; dw's sums over T are reduced in another order (one fp32 atomic per channel,
// tap and block). Why: the scalar kernels ran at 13% of the copy ceiling on an H200, 6.3 ms of a
// one-row slice step (bench/results/2026-11-30-slice-v3).
constexpr int kVec = 8;
constexpr int kFwdRows = 16;    // positions per thread, forward
constexpr int kBwdRows = 64;    // positions per thread, backward (dw partial sums per thread)
constexpr int kBwdChunks = 4;   // threads per block along positions (their dw sums reduced in the block)
constexpr int kGroupsPerBlock = 32;

struct Vec8 {
  float v[kVec];
};

__device__ __forceinline__ Vec8 load8(const __nv_bfloat16* p) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
  Vec8 out;
#pragma unroll
  for (int i = 0; i < kVec / 2; ++i) {
    const float2 f = __bfloat1622float2(h[i]);
    out.v[2 * i] = f.x;
    out.v[2 * i + 1] = f.y;
  }
  return out;
}
__device__ __forceinline__ Vec8 zero8() {
  Vec8 out;
#pragma unroll
  for (int i = 0; i < kVec; ++i) out.v[i] = 0.0f;
  return out;
}
__device__ __forceinline__ void store8(__nv_bfloat16* p, const float (&acc)[kVec]) {
  uint4 raw;
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&raw);
#pragma unroll
  for (int i = 0; i < kVec / 2; ++i) h[i] = __floats2bfloat162_rn(acc[2 * i], acc[2 * i + 1]);
  *reinterpret_cast<uint4*>(p) = raw;
}

// wr[ch][j] = w[c0 + ch, j]: the taps of a thread's 8 channels.
template <int K>
__device__ __forceinline__ void load_taps(float (&wr)[kVec][K], const float* __restrict__ w, int64_t c0) {
#pragma unroll
  for (int ch = 0; ch < kVec; ++ch)
#pragma unroll
    for (int j = 0; j < K; ++j) wr[ch][j] = w[(c0 + ch) * K + j];
}

// Grid (channel groups / 32, ceil(T / kFwdRows)), block 32.
template <int K>
__global__ void short_conv_forward_vec_kernel(const __nv_bfloat16* __restrict__ x, const float* __restrict__ w,
                                              int64_t T, int64_t C, __nv_bfloat16* __restrict__ y) {
  const int64_t group = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (group * kVec >= C) return;
  const int64_t c0 = group * kVec;
  const int64_t t0 = blockIdx.y * int64_t(kFwdRows), t1 = min(T, t0 + kFwdRows);
  float wr[kVec][K];
  load_taps<K>(wr, w, c0);
  Vec8 hist[K];  // hist[j] = x[t - (K-1) + j]; hist[K-1] is row t
#pragma unroll
  for (int j = 0; j < K - 1; ++j) {
    const int64_t s = t0 - (K - 1) + j;
    hist[j] = s >= 0 ? load8(x + s * C + c0) : zero8();
  }
  for (int64_t t = t0; t < t1; ++t) {
    hist[K - 1] = load8(x + t * C + c0);
    float acc[kVec];
#pragma unroll
    for (int ch = 0; ch < kVec; ++ch) {
      acc[ch] = hist[K - 1].v[ch];
#pragma unroll
      for (int j = 0; j < K; ++j) acc[ch] += wr[ch][j] * hist[j].v[ch];
    }
    store8(y + t * C + c0, acc);
#pragma unroll
    for (int j = 0; j < K - 1; ++j) hist[j] = hist[j + 1];
  }
}

// dx and dw in one pass. Grid (channel groups / 32, ceil(T / (kBwdRows * kBwdChunks))), block
// (32, kBwdChunks): thread (gx, gy) owns 8 channels and positions [t0, t0 + kBwdRows).
template <int K>
__global__ void short_conv_backward_vec_kernel(const __nv_bfloat16* __restrict__ x, const float* __restrict__ w,
                                               const __nv_bfloat16* __restrict__ dy, int64_t T, int64_t C,
                                               __nv_bfloat16* __restrict__ dx, float* __restrict__ dw) {
  __shared__ float part[kBwdChunks][kGroupsPerBlock][kVec * K + 1];
  const int64_t group = blockIdx.x * int64_t(kGroupsPerBlock) + threadIdx.x;
  const bool active = group * kVec < C;
  const int64_t c0 = group * kVec;
  const int64_t t0 = (blockIdx.y * int64_t(kBwdChunks) + threadIdx.y) * kBwdRows, t1 = min(T, t0 + kBwdRows);
  float dw_acc[kVec][K];
#pragma unroll
  for (int ch = 0; ch < kVec; ++ch)
#pragma unroll
    for (int j = 0; j < K; ++j) dw_acc[ch][j] = 0.0f;
  if (active && t0 < T) {
    float wr[kVec][K];
    load_taps<K>(wr, w, c0);
    Vec8 xh[K];   // xh[j] = x[t - (K-1) + j]
    Vec8 fut[K];  // fut[i] = dy[t + i]
#pragma unroll
    for (int j = 0; j < K - 1; ++j) {
      const int64_t s = t0 - (K - 1) + j;
      xh[j] = s >= 0 ? load8(x + s * C + c0) : zero8();
      const int64_t u = t0 + j;
      fut[j] = u < T ? load8(dy + u * C + c0) : zero8();
    }
    for (int64_t t = t0; t < t1; ++t) {
      xh[K - 1] = load8(x + t * C + c0);
      fut[K - 1] = t + (K - 1) < T ? load8(dy + (t + (K - 1)) * C + c0) : zero8();
      float acc[kVec];
#pragma unroll
      for (int ch = 0; ch < kVec; ++ch) {
        acc[ch] = fut[0].v[ch];
#pragma unroll
        for (int j = 0; j < K; ++j) acc[ch] += wr[ch][j] * fut[K - 1 - j].v[ch];
#pragma unroll
        for (int j = 0; j < K; ++j) dw_acc[ch][j] = fmaf(fut[0].v[ch], xh[j].v[ch], dw_acc[ch][j]);
      }
      store8(dx + t * C + c0, acc);
#pragma unroll
      for (int j = 0; j < K - 1; ++j) {
        xh[j] = xh[j + 1];
        fut[j] = fut[j + 1];
      }
    }
  }
#pragma unroll
  for (int ch = 0; ch < kVec; ++ch)
#pragma unroll
    for (int j = 0; j < K; ++j) part[threadIdx.y][threadIdx.x][ch * K + j] = dw_acc[ch][j];
  __syncthreads();
  // The block's threads finish its 32 groups x (8 channels x K taps) sums over the kBwdChunks chunks.
  const int tid = threadIdx.y * kGroupsPerBlock + threadIdx.x;
  for (int idx = tid; idx < kGroupsPerBlock * kVec * K; idx += kGroupsPerBlock * kBwdChunks) {
    const int gx = idx / (kVec * K), e = idx % (kVec * K);
    const int64_t c = (blockIdx.x * int64_t(kGroupsPerBlock) + gx) * kVec + e / K;
    if (c >= C) continue;
    float sum = 0.0f;
    for (int i = 0; i < kBwdChunks; ++i) sum += part[i][gx][e];
    atomicAdd(dw + c * K + e % K, sum);
  }
}

bool vec_path(int64_t C, std::initializer_list<const void*> ptrs) {
  if (C % kVec != 0) return false;
  for (const void* p : ptrs)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

template <int K>
void launch_forward_vec(cudaStream_t stream, const Tensor& x, const Tensor& w, const Tensor& y, int64_t T, int64_t C) {
  const int64_t groups = C / kVec;
  const dim3 grid(static_cast<unsigned>((groups + kGroupsPerBlock - 1) / kGroupsPerBlock),
                  static_cast<unsigned>((T + kFwdRows - 1) / kFwdRows));
  short_conv_forward_vec_kernel<K><<<grid, kGroupsPerBlock, 0, stream>>>(
      x.data_as<__nv_bfloat16>(), w.data_as<float>(), T, C, y.data_as<__nv_bfloat16>());
}

template <int K>
void launch_backward_vec(cudaStream_t stream, const Tensor& x, const Tensor& w, const Tensor& dy, const Tensor& dx,
                         const Tensor& dw, int64_t T, int64_t C) {
  const int64_t groups = C / kVec;
  const dim3 grid(static_cast<unsigned>((groups + kGroupsPerBlock - 1) / kGroupsPerBlock),
                  static_cast<unsigned>((T + kBwdRows * kBwdChunks - 1) / (kBwdRows * kBwdChunks)));
  short_conv_backward_vec_kernel<K><<<grid, dim3(kGroupsPerBlock, kBwdChunks), 0, stream>>>(
      x.data_as<__nv_bfloat16>(), w.data_as<float>(), dy.data_as<__nv_bfloat16>(), T, C,
      dx.data_as<__nv_bfloat16>(), dw.data_as<float>());
}

// The vectorised kernels are instantiated for every tap count the op accepts (1..kMaxTaps).
#define QUILL_SHORT_CONV_TAPS(K, CALL) \
  switch (K) {                         \
    case 1: CALL(1); break;            \
    case 2: CALL(2); break;            \
    case 3: CALL(3); break;            \
    case 4: CALL(4); break;            \
    case 5: CALL(5); break;            \
    case 6: CALL(6); break;            \
    case 7: CALL(7); break;            \
    default: CALL(8); break;           \
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
  if (vec_path(C, {x_TC.data(), y_TC.data()})) {
#define QUILL_FWD(KT) launch_forward_vec<KT>(stream_of(ctx), x_TC, w_CK, y_TC, T, C)
    QUILL_SHORT_CONV_TAPS(K, QUILL_FWD)
#undef QUILL_FWD
    QUILL_CUDA_CHECK_LAUNCH("short_conv_forward_vec_kernel");
    return;
  }
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
  if (vec_path(C, {x_TC.data(), dy_TC.data(), dx_TC.data()})) {
#define QUILL_BWD(KT) launch_backward_vec<KT>(stream, x_TC, w_CK, dy_TC, dx_TC, dw_CK, T, C)
    QUILL_SHORT_CONV_TAPS(K, QUILL_BWD)
#undef QUILL_BWD
    QUILL_CUDA_CHECK_LAUNCH("short_conv_backward_vec_kernel");
    return;
  }
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
