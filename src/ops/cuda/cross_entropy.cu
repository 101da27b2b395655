// CUDA masked next-token cross-entropy fused with its gradient (ops/cross_entropy.h; dtypes:
// docs/decisions/cuda-precision.md).
//   L = vocab_limit (the unpadded vocabulary); per row t with weight w[t] != 0:
//     lse[t] = log sum_{v<L} exp(logits[t, v])                         (online max/sum, fp32)
//     loss  += w[t] * (lse[t] - logits[t, target[t]])                   (per row in double, summed in double)
//     dlogits[t, v] = grad_scale * w[t] * (exp(logits[t, v] - lse[t]) - [v == target[t]])   for v < L
//   dlogits[t, v >= L] = 0; rows with w[t] == 0 get an all-zero gradient (their target is not read).
// Legend: T positions, V padded vocabulary (up to 201,024). logits_TV and dlogits_TV BF16 (or both F32)
// [T, V]; targets_T I32 [T]; weights_T F32 [T]; all on the device. Returns the loss sum (synchronises).
// Layout: one block per row, two passes over the row (online max/sum, then the gradient), 16-byte
// loads when V and the pointers allow; nothing of the row is held beyond registers. A second kernel
// sums the per-row losses in a fixed order (deterministic), and one copy brings back that sum with the
// first bad position.
// Preconditions: a target outside [0, L) with a nonzero weight is an error naming the position; it is
// detected before the gradient kernel writes anything, so dlogits stays untouched then.
// dlogits may alias logits: each element is read by the thread that later writes it, after the row's
// statistics (and the target logit) are taken.
#include <algorithm>
#include <climits>
#include <cmath>
#include <string>

#include "ops/cuda/cuda_resources.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/softmax_stats.cuh"
#include "ops/dispatch.h"

namespace quill::cuda {
namespace {

using ops_detail::require_dtype;
using ops_detail::require_shape;

void require_device(const char* op, const char* name, const Tensor& t) {
  QUILL_CHECK(t.defined() && t.device() == Device::CUDA, "{}: {} must be in GPU memory, got {}", op, name,
              t.defined() ? t.describe() : std::string("(undefined)"));
}

struct Status {
  double total;
  unsigned first_bad;  // UINT_MAX when every weighted target is in range
};

__global__ void check_targets_kernel(const int32_t* targets, const float* weights, int64_t n_pos, int64_t L,
                                     unsigned* first_bad) {
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < n_pos; t += int64_t(gridDim.x) * blockDim.x)
    if (weights[t] != 0.f && (targets[t] < 0 || targets[t] >= L)) atomicMin(first_bad, static_cast<unsigned>(t));
}

// The block's (max, sum of exp(x - max)) over a row's columns below limit, in every thread.
template <typename T, int VEC>
__device__ __forceinline__ void row_softmax_stats(const Pack<T, VEC>* row, int64_t n_vec, int64_t limit, float* s_m,
                                                  float* s_s, float& m, float& s) {
  m = -INFINITY;
  s = 0.f;
  for (int64_t i = threadIdx.x; i < n_vec; i += blockDim.x) {
    const Pack<T, VEC> p = row[i];
#pragma unroll
    for (int j = 0; j < VEC; ++j)
      if (i * VEC + j < limit) online_add(m, s, to_f32(p.v[j]));
  }
  block_online_reduce(m, s, s_m, s_s);
}

// A row's gradient of 0 (an unsupervised row) by the block.
template <typename T, int VEC>
__device__ __forceinline__ void zero_row(Pack<T, VEC>* grow, int64_t n_vec) {
  Pack<T, VEC> z;
#pragma unroll
  for (int j = 0; j < VEC; ++j) z.v[j] = from_f32<T>(0.f);
  for (int64_t i = threadIdx.x; i < n_vec; i += blockDim.x) grow[i] = z;
}

// dlogits of a row by the block: g * (softmax - onehot(target)) for columns below limit, 0 beyond.
template <typename T, int VEC>
__device__ __forceinline__ void write_row_gradient(const Pack<T, VEC>* row, Pack<T, VEC>* grow, int64_t n_vec,
                                                   int64_t limit, int64_t target, float lse, float g) {
  for (int64_t i = threadIdx.x; i < n_vec; i += blockDim.x) {
    const Pack<T, VEC> p = row[i];
    Pack<T, VEC> out;
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const int64_t col = i * VEC + j;
      const float prob = expf(to_f32(p.v[j]) - lse);
      out.v[j] = from_f32<T>(col < limit ? g * (col == target ? prob - 1.0f : prob) : 0.f);
    }
    grow[i] = out;
  }
}

template <typename T, int VEC>
__global__ void __launch_bounds__(1024)
    cross_entropy_kernel(const T* logits, const int32_t* targets, const float* weights, int64_t V, int64_t L,
                         float grad_scale, T* dlogits, double* row_loss, const unsigned* first_bad) {
  if (*first_bad != UINT_MAX) return;  // a bad target: write nothing
  using P = Pack<T, VEC>;
  const int64_t t = blockIdx.x, n_vec = V / VEC;
  const P* row = reinterpret_cast<const P*>(logits + t * V);
  P* grow = reinterpret_cast<P*>(dlogits + t * V);
  const float w = weights[t];
  if (w == 0.f) {
    zero_row(grow, n_vec);
    if (threadIdx.x == 0) row_loss[t] = 0.0;
    return;
  }
  const int64_t target = targets[t];
  __shared__ float s_target_logit, s_m[32], s_s[32];
  if (threadIdx.x == 0) s_target_logit = to_f32(logits[t * V + target]);

  float m, s;
  row_softmax_stats(row, n_vec, L, s_m, s_s, m, s);
  const float lse = m + logf(s);
  const float g = grad_scale * w;
  write_row_gradient(row, grow, n_vec, L, target, lse, g);
  if (threadIdx.x == 0) row_loss[t] = static_cast<double>(w) * (static_cast<double>(lse) - s_target_logit);
}


// Vocab-parallel statistics of each row over this shard's first `valid` columns (ops/cross_entropy.h):
// stats[t] = (max, sum of exp(x - max), the target's logit when this shard holds it, else 0).
template <typename T, int VEC>
__global__ void __launch_bounds__(1024)
    shard_stats_kernel(const T* logits, const int32_t* targets, const float* weights, int64_t V, int64_t valid,
                       int64_t begin, float* stats) {
  using P = Pack<T, VEC>;
  const int64_t t = blockIdx.x, n_vec = V / VEC;
  const P* row = reinterpret_cast<const P*>(logits + t * V);
  __shared__ float s_m[32], s_s[32];
  float m, s;
  row_softmax_stats(row, n_vec, valid, s_m, s_s, m, s);
  if (threadIdx.x == 0) {
    const int64_t local = static_cast<int64_t>(targets[t]) - begin;
    stats[t * 3 + 0] = m;
    stats[t * 3 + 1] = s;
    stats[t * 3 + 2] = weights[t] != 0.f && local >= 0 && local < valid ? to_f32(logits[t * V + local]) : 0.f;
  }
}

// The row's statistics merged over the R shards in shard order, then this shard's gradient columns
// and the row's loss (as cross_entropy_kernel with one shard).
template <typename T, int VEC>
__global__ void __launch_bounds__(1024)
    shard_backward_kernel(const T* logits, const int32_t* targets, const float* weights, int64_t V, int64_t valid,
                          int64_t begin, const float* all_stats, int R, int64_t n_pos, float grad_scale, T* dlogits,
                          double* row_loss) {
  using P = Pack<T, VEC>;
  const int64_t t = blockIdx.x, n_vec = V / VEC;
  const P* row = reinterpret_cast<const P*>(logits + t * V);
  P* grow = reinterpret_cast<P*>(dlogits + t * V);
  const float w = weights[t];
  if (w == 0.f) {
    zero_row(grow, n_vec);
    if (threadIdx.x == 0) row_loss[t] = 0.0;
    return;
  }
  float m = -INFINITY, s = 0.f, target_logit = 0.f;
  for (int r = 0; r < R; ++r) {
    const float* st = all_stats + (static_cast<int64_t>(r) * n_pos + t) * 3;
    online_merge(m, s, st[0], st[1]);
    target_logit += st[2];  // one shard holds the target; the others add 0
  }
  const float lse = m + logf(s);
  const float g = grad_scale * w;
  const int64_t local = static_cast<int64_t>(targets[t]) - begin;
  write_row_gradient(row, grow, n_vec, valid, local, lse, g);
  if (threadIdx.x == 0) row_loss[t] = static_cast<double>(w) * (static_cast<double>(lse) - target_logit);
}

// One block of 1024 threads: a fixed-order sum of the row losses (the same bits every run).
__global__ void __launch_bounds__(1024) sum_losses_kernel(const double* row_loss, int64_t n_pos, Status* status) {
  __shared__ double part[1024];
  double acc = 0;
  if (status->first_bad == UINT_MAX)
    for (int64_t i = threadIdx.x; i < n_pos; i += blockDim.x) acc += row_loss[i];
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
    if (threadIdx.x < stride) part[threadIdx.x] += part[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) status->total = part[0];
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

template <typename T, int VEC>
void launch_rows(const DeviceContext& ctx, const Tensor& logits_TV, const Tensor& targets_T, const Tensor& weights_T,
                 int64_t L, double grad_scale, const Tensor& dlogits_TV, double* row_loss, const unsigned* first_bad) {
  const int64_t n_pos = logits_TV.dim(0), V = logits_TV.dim(1);
  const int threads = V / VEC >= 8192 ? 1024 : 256;
  cross_entropy_kernel<T, VEC><<<static_cast<unsigned>(n_pos), threads, 0, stream_of(ctx)>>>(
      logits_TV.data_as<T>(), targets_T.data_as<int32_t>(), weights_T.data_as<float>(), V, L,
      static_cast<float>(grad_scale), dlogits_TV.data_as<T>(), row_loss, first_bad);
  QUILL_CUDA_CHECK_LAUNCH("cross_entropy_kernel");
}

}  // namespace

double cross_entropy_forward_backward(const DeviceContext& ctx, const Tensor& logits_TV, const Tensor& targets_T,
                                      const Tensor& weights_T, int64_t vocab_limit, double grad_scale,
                                      const Tensor& dlogits_TV) {
  const char* op = "cross_entropy_forward_backward";
  QUILL_CHECK(logits_TV.defined() && logits_TV.ndim() == 2, "{}: logits must be 2-D [T, V], got {}", op,
              logits_TV.defined() ? logits_TV.describe() : std::string("(undefined)"));
  const int64_t n_pos = logits_TV.dim(0), V = logits_TV.dim(1);
  QUILL_CHECK(vocab_limit >= 1 && vocab_limit <= V, "{}: vocab_limit {} is outside [1, {}] (the logits' columns)", op,
              vocab_limit, V);
  QUILL_CHECK(logits_TV.dtype() == DType::BF16 || logits_TV.dtype() == DType::F32,
              "{}: logits has dtype {}, expected BF16 or F32", op, dtype_name(logits_TV.dtype()));
  require_shape(op, "targets", targets_T, {n_pos});
  require_shape(op, "weights", weights_T, {n_pos});
  require_shape(op, "dlogits", dlogits_TV, {n_pos, V});
  require_dtype(op, "targets", targets_T, DType::I32);
  require_dtype(op, "weights", weights_T, DType::F32);
  require_dtype(op, "dlogits", dlogits_TV, logits_TV.dtype());
  for (auto [name, t] : {std::pair<const char*, const Tensor*>{"logits", &logits_TV}, {"targets", &targets_T},
                         {"weights", &weights_T}, {"dlogits", &dlogits_TV}})
    require_device(op, name, *t);
  QUILL_CHECK(std::isfinite(grad_scale), "{}: grad_scale must be finite, got {}", op, grad_scale);
  QUILL_CHECK(n_pos <= INT_MAX, "{}: {} rows exceed the kernel's grid", op, n_pos);
  if (n_pos == 0) return 0.0;

  cudaStream_t stream = stream_of(ctx);
  Tensor scratch = Tensor::empty({static_cast<int64_t>(sizeof(Status)) + 8 * n_pos}, DType::U8, *ctx.allocator);
  Status* status = static_cast<Status*>(scratch.data());
  double* row_loss = reinterpret_cast<double*>(static_cast<char*>(scratch.data()) + sizeof(Status));
  QUILL_CUDA_CHECK(cudaMemsetAsync(&status->first_bad, 0xff, sizeof(unsigned), stream));
  const int check_blocks = static_cast<int>(std::min<int64_t>((n_pos + 255) / 256, 1024));
  check_targets_kernel<<<check_blocks, 256, 0, stream>>>(targets_T.data_as<int32_t>(), weights_T.data_as<float>(),
                                                        n_pos, vocab_limit, &status->first_bad);
  QUILL_CUDA_CHECK_LAUNCH("check_targets_kernel");

  const bool aligned = aligned16(logits_TV.data()) && aligned16(dlogits_TV.data());
  if (logits_TV.dtype() == DType::BF16) {
    if (aligned && V % 8 == 0)
      launch_rows<__nv_bfloat16, 8>(ctx, logits_TV, targets_T, weights_T, vocab_limit, grad_scale, dlogits_TV,
                                    row_loss, &status->first_bad);
    else
      launch_rows<__nv_bfloat16, 1>(ctx, logits_TV, targets_T, weights_T, vocab_limit, grad_scale, dlogits_TV,
                                    row_loss, &status->first_bad);
  } else {
    if (aligned && V % 4 == 0)
      launch_rows<float, 4>(ctx, logits_TV, targets_T, weights_T, vocab_limit, grad_scale, dlogits_TV, row_loss,
                            &status->first_bad);
    else
      launch_rows<float, 1>(ctx, logits_TV, targets_T, weights_T, vocab_limit, grad_scale, dlogits_TV, row_loss,
                            &status->first_bad);
  }
  sum_losses_kernel<<<1, 1024, 0, stream>>>(row_loss, n_pos, status);
  QUILL_CUDA_CHECK_LAUNCH("sum_losses_kernel");

  Status host{};
  QUILL_CUDA_CHECK(cudaMemcpyAsync(&host, status, sizeof(Status), cudaMemcpyDeviceToHost, stream));
  QUILL_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (host.first_bad != UINT_MAX) {
    int32_t target = 0;
    float weight = 0;
    QUILL_CUDA_CHECK(cudaMemcpy(&target, targets_T.data_as<int32_t>() + host.first_bad, sizeof(target),
                                cudaMemcpyDeviceToHost));
    QUILL_CUDA_CHECK(cudaMemcpy(&weight, weights_T.data_as<float>() + host.first_bad, sizeof(weight),
                                cudaMemcpyDeviceToHost));
    QUILL_FAIL("{}: target {} at position {} (weight {}) is outside the vocabulary [0, {})", op, target,
               host.first_bad, static_cast<double>(weight), vocab_limit);
  }
  return host.total;
}

namespace {

// The checks both shard calls share; returns the shard's columns below vocab_limit.
int64_t check_shard_args(const char* op, const Tensor& logits_TV, const Tensor& targets_T, const Tensor& weights_T,
                         int64_t vocab_begin, int64_t vocab_limit) {
  QUILL_CHECK(logits_TV.defined() && logits_TV.ndim() == 2, "{}: logits must be 2-D [T, V], got {}", op,
              logits_TV.defined() ? logits_TV.describe() : std::string("(undefined)"));
  const int64_t n_pos = logits_TV.dim(0), V = logits_TV.dim(1);
  QUILL_CHECK(vocab_begin >= 0 && vocab_limit >= 1, "{}: vocab_begin {} / vocab_limit {} out of range", op,
              vocab_begin, vocab_limit);
  QUILL_CHECK(logits_TV.dtype() == DType::BF16 || logits_TV.dtype() == DType::F32,
              "{}: logits has dtype {}, expected BF16 or F32", op, dtype_name(logits_TV.dtype()));
  require_shape(op, "targets", targets_T, {n_pos});
  require_shape(op, "weights", weights_T, {n_pos});
  require_dtype(op, "targets", targets_T, DType::I32);
  require_dtype(op, "weights", weights_T, DType::F32);
  for (auto [name, t] : {std::pair<const char*, const Tensor*>{"logits", &logits_TV}, {"targets", &targets_T},
                         {"weights", &weights_T}})
    require_device(op, name, *t);
  QUILL_CHECK(n_pos <= INT_MAX, "{}: {} rows exceed the kernel's grid", op, n_pos);
  return std::clamp<int64_t>(vocab_limit - vocab_begin, 0, V);
}

template <template <typename, int> class Launch, typename... A>
void by_dtype(const Tensor& logits_TV, const Tensor& other, A&&... args) {
  const int64_t V = logits_TV.dim(1);
  const bool aligned = aligned16(logits_TV.data()) && (!other.defined() || aligned16(other.data()));
  if (logits_TV.dtype() == DType::BF16) {
    if (aligned && V % 8 == 0) Launch<__nv_bfloat16, 8>::run(args...);
    else Launch<__nv_bfloat16, 1>::run(args...);
  } else {
    if (aligned && V % 4 == 0) Launch<float, 4>::run(args...);
    else Launch<float, 1>::run(args...);
  }
}

template <typename T, int VEC>
struct LaunchStats {
  static void run(cudaStream_t stream, const Tensor& logits_TV, const Tensor& targets_T, const Tensor& weights_T,
                  int64_t valid, int64_t begin, const Tensor& stats_T3) {
    const int64_t n_pos = logits_TV.dim(0), V = logits_TV.dim(1);
    shard_stats_kernel<T, VEC><<<static_cast<unsigned>(n_pos), V / VEC >= 8192 ? 1024 : 256, 0, stream>>>(
        logits_TV.data_as<T>(), targets_T.data_as<int32_t>(), weights_T.data_as<float>(), V, valid, begin,
        stats_T3.data_as<float>());
  }
};

template <typename T, int VEC>
struct LaunchShardBackward {
  static void run(cudaStream_t stream, const Tensor& logits_TV, const Tensor& targets_T, const Tensor& weights_T,
                  int64_t valid, int64_t begin, const Tensor& all_stats, double grad_scale, const Tensor& dlogits_TV,
                  double* row_loss) {
    const int64_t n_pos = logits_TV.dim(0), V = logits_TV.dim(1);
    shard_backward_kernel<T, VEC><<<static_cast<unsigned>(n_pos), V / VEC >= 8192 ? 1024 : 256, 0, stream>>>(
        logits_TV.data_as<T>(), targets_T.data_as<int32_t>(), weights_T.data_as<float>(), V, valid, begin,
        all_stats.data_as<float>(), static_cast<int>(all_stats.dim(0)), n_pos, static_cast<float>(grad_scale),
        dlogits_TV.data_as<T>(), row_loss);
  }
};

}  // namespace

void cross_entropy_shard_stats(const DeviceContext& ctx, const Tensor& logits_TV, const Tensor& targets_T,
                               const Tensor& weights_T, int64_t vocab_begin, int64_t vocab_limit,
                               const Tensor& stats_T3) {
  const char* op = "cross_entropy_shard_stats";
  const int64_t valid = check_shard_args(op, logits_TV, targets_T, weights_T, vocab_begin, vocab_limit);
  const int64_t n_pos = logits_TV.dim(0);
  require_shape(op, "stats", stats_T3, {n_pos, 3});
  require_dtype(op, "stats", stats_T3, DType::F32);
  require_device(op, "stats", stats_T3);
  if (n_pos == 0) return;
  cudaStream_t stream = stream_of(ctx);
  Tensor scratch = Tensor::empty({static_cast<int64_t>(sizeof(unsigned))}, DType::U8, *ctx.allocator);
  unsigned* first_bad = static_cast<unsigned*>(scratch.data());
  QUILL_CUDA_CHECK(cudaMemsetAsync(first_bad, 0xff, sizeof(unsigned), stream));
  const int check_blocks = static_cast<int>(std::min<int64_t>((n_pos + 255) / 256, 1024));
  check_targets_kernel<<<check_blocks, 256, 0, stream>>>(targets_T.data_as<int32_t>(), weights_T.data_as<float>(),
                                                        n_pos, vocab_limit, first_bad);
  QUILL_CUDA_CHECK_LAUNCH("check_targets_kernel");
  unsigned bad = 0;
  QUILL_CUDA_CHECK(cudaMemcpyAsync(&bad, first_bad, sizeof(bad), cudaMemcpyDeviceToHost, stream));
  QUILL_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (bad != UINT_MAX) {
    int32_t target = 0;
    QUILL_CUDA_CHECK(cudaMemcpy(&target, targets_T.data_as<int32_t>() + bad, sizeof(target), cudaMemcpyDeviceToHost));
    QUILL_FAIL("{}: target {} at position {} is outside the vocabulary [0, {})", op, target, bad, vocab_limit);
  }
  by_dtype<LaunchStats>(logits_TV, Tensor(), stream, logits_TV, targets_T, weights_T, valid, vocab_begin, stats_T3);
  QUILL_CUDA_CHECK_LAUNCH("shard_stats_kernel");
}

double cross_entropy_shard_backward(const DeviceContext& ctx, const Tensor& logits_TV, const Tensor& targets_T,
                                    const Tensor& weights_T, int64_t vocab_begin, int64_t vocab_limit,
                                    const Tensor& all_stats_RT3, double grad_scale, const Tensor& dlogits_TV) {
  const char* op = "cross_entropy_shard_backward";
  const int64_t valid = check_shard_args(op, logits_TV, targets_T, weights_T, vocab_begin, vocab_limit);
  const int64_t n_pos = logits_TV.dim(0), V = logits_TV.dim(1);
  QUILL_CHECK(all_stats_RT3.defined() && all_stats_RT3.ndim() == 3 && all_stats_RT3.dim(1) == n_pos &&
                  all_stats_RT3.dim(2) == 3 && all_stats_RT3.dim(0) >= 1,
              "{}: all_stats must be [R, {}, 3], got {}", op, n_pos,
              all_stats_RT3.defined() ? all_stats_RT3.describe() : std::string("(undefined)"));
  require_dtype(op, "all_stats", all_stats_RT3, DType::F32);
  require_device(op, "all_stats", all_stats_RT3);
  require_shape(op, "dlogits", dlogits_TV, {n_pos, V});
  require_dtype(op, "dlogits", dlogits_TV, logits_TV.dtype());
  require_device(op, "dlogits", dlogits_TV);
  QUILL_CHECK(std::isfinite(grad_scale), "{}: grad_scale must be finite, got {}", op, grad_scale);
  if (n_pos == 0) return 0.0;
  cudaStream_t stream = stream_of(ctx);
  Tensor scratch = Tensor::empty({static_cast<int64_t>(sizeof(Status)) + 8 * n_pos}, DType::U8, *ctx.allocator);
  Status* status = static_cast<Status*>(scratch.data());
  double* row_loss = reinterpret_cast<double*>(static_cast<char*>(scratch.data()) + sizeof(Status));
  QUILL_CUDA_CHECK(cudaMemsetAsync(&status->first_bad, 0xff, sizeof(unsigned), stream));  // checked by the stats call
  by_dtype<LaunchShardBackward>(logits_TV, dlogits_TV, stream, logits_TV, targets_T, weights_T, valid, vocab_begin,
                                all_stats_RT3, grad_scale, dlogits_TV, row_loss);
  QUILL_CUDA_CHECK_LAUNCH("shard_backward_kernel");
  sum_losses_kernel<<<1, 1024, 0, stream>>>(row_loss, n_pos, status);
  QUILL_CUDA_CHECK_LAUNCH("sum_losses_kernel");
  Status host{};
  QUILL_CUDA_CHECK(cudaMemcpyAsync(&host, status, sizeof(Status), cudaMemcpyDeviceToHost, stream));
  QUILL_CUDA_CHECK(cudaStreamSynchronize(stream));
  return host.total;
}

}  // namespace quill::cuda
