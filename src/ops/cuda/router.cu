// CUDA Inkling top-k router (ops/router.h; dtypes: docs/decisions/cuda-precision.md), after the gate
// linear. Everything is fp32, as the CPU reference's F32 path, which it mirrors operation by operation:
//   choice_e = 1 / (1 + exp(-logit_e)) + bias_e for e < E (a NaN choice ranks as -inf);
//   topk     = the k largest choices, ties to the lower expert index, listed by descending choice;
//   u        = logsigmoid(logits[topk] ++ logits[E:E+S]) = min(x, 0) - log1p(exp(-|x|));
//   p_i      = exp(u_i - max u) / sum_j exp(u_j - max u)   (the sum and the division in double);
//   w_i      = p_i * (float(route_scale) * gs).
// Backward, with C = route_scale * gs (double) and dp = dw * C:
//   du_i = p_i (dp_i - sum_j p_j dp_j);  dlogit_i = du_i * sigmoid(-logit_i);  unchosen routed logits 0;
//   dgs += sum over rows and i of dw_i * route_scale * p_i.
// Legend: N tokens, E routed experts (<= 1024 for the forward), S shared experts, X = E + S, k = top_k,
// W = k + S (<= 32). logits_NX F32 [N, X], bias_E F32 [E], global_scale F32 [1] (device, read by the
// kernels), topk_idx_Nk I32 [N, k], weights_NW F32 [N, W], dweights_NW / dlogits_NX like them,
// dglobal_scale F32 [1] (accumulated: each block's sum, added in block order: ordered_sum.h).
// Layout: one warp per token row. Selection: each lane owns experts lane, lane + 32, ...; k rounds of
// "each lane's best untaken candidate, then a warp argmax on (choice desc, index asc)". Weights: lane i
// owns weight i.
// Preconditions: a replayed topk_idx outside [0, E) is an error naming the element; it is found on the device (the
// row is skipped) and reported after one synchronisation. The backward takes the forward's choice, checked there:
// it skips such a row without a synchronisation (ops/router.h).
#include <algorithm>
#include <climits>
#include <cmath>
#include <string>

#include "ops/cuda/cuda_resources.h"
#include "ops/cuda/ordered_sum.h"
#include "ops/cuda/kernels.h"
#include "ops/dispatch.h"

namespace quill::cuda {
namespace {

using ops_detail::require_dtype;
using ops_detail::require_shape;

constexpr int kWarpsPerBlock = 8;
constexpr int kMaxW = 32;

void require_device(const char* op, const char* name, const Tensor& t) {
  QUILL_CHECK(t.defined() && t.device() == Device::CUDA, "{}: {} must be in GPU memory, got {}", op, name,
              t.defined() ? t.describe() : std::string("(undefined)"));
}

__device__ __forceinline__ float sigmoid_f32(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float log_sigmoid_f32(float x) { return fminf(x, 0.f) - log1pf(expf(-fabsf(x))); }

// (a_score, a_idx) ranks before (b_score, b_idx).
__device__ __forceinline__ bool ranks_before(float as, int ai, float bs, int bi) {
  return as > bs || (as == bs && ai < bi);
}

// Lane i < W: p_i of the row (others 0), given its logit l (ignored for lanes >= W).
__device__ __forceinline__ float router_prob(float l, int lane, int W) {
  const bool mine = lane < W;
  const float u = mine ? log_sigmoid_f32(l) : -INFINITY;
  float u_max = u;
  for (int o = 16; o > 0; o >>= 1) u_max = fmaxf(u_max, __shfl_xor_sync(0xffffffffu, u_max, o));
  const float e = mine ? expf(u - u_max) : 0.f;
  double sum = e;
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  return mine ? static_cast<float>(static_cast<double>(e) / sum) : 0.f;
}

// The row's weight logit for lane i < W: the chosen routed logit (expert `idx`) or shared logit i - k.
__device__ __forceinline__ float weight_logit(const float* row, int lane, int k, int W, int E, int idx) {
  if (lane >= W) return 0.f;
  return lane < k ? row[idx] : row[E + (lane - k)];
}

// PER = experts per lane (E <= 32 * PER). replay: topk is read, not chosen.
template <int PER>
__global__ void router_forward_kernel(const float* logits, const float* bias, const float* global_scale, int64_t N,
                                      int E, int S, int k, float route_scale, bool replay, int32_t* topk,
                                      float* weights, unsigned* first_bad) {
  const int lane = threadIdx.x & 31;
  const int64_t n = blockIdx.x * int64_t(kWarpsPerBlock) + (threadIdx.x >> 5);
  if (n >= N) return;  // whole warps leave together
  const int X = E + S, W = k + S;
  const float* row = logits + n * X;
  int32_t* tk = topk + n * k;
  int my_idx = 0;  // lane j < k: the j-th chosen expert
  if (replay) {
    const int32_t idx = lane < k ? tk[lane] : 0;
    const bool bad = idx < 0 || idx >= E;
    const unsigned bad_lanes = __ballot_sync(0xffffffffu, bad);
    if (bad_lanes) {
      if (lane == __ffs(bad_lanes) - 1) atomicMin(first_bad, static_cast<unsigned>(n * k + lane));
      return;
    }
    my_idx = idx;
  } else {
    float choice[PER];
    unsigned taken = 0;  // bit i: expert lane + 32 i is chosen already or does not exist
#pragma unroll
    for (int i = 0; i < PER; ++i) {
      const int e = lane + 32 * i;
      if (e < E) {
        const float c = sigmoid_f32(row[e]) + bias[e];
        choice[i] = isnan(c) ? -INFINITY : c;
      } else {
        choice[i] = -INFINITY;
        taken |= 1u << i;
      }
    }
    for (int j = 0; j < k; ++j) {
      float best_s = -INFINITY;
      int best_i = INT_MAX;
#pragma unroll
      for (int i = 0; i < PER; ++i)
        if (!((taken >> i) & 1u) && ranks_before(choice[i], lane + 32 * i, best_s, best_i)) {
          best_s = choice[i];
          best_i = lane + 32 * i;
        }
      for (int o = 16; o > 0; o >>= 1) {
        const float os = __shfl_xor_sync(0xffffffffu, best_s, o);
        const int oi = __shfl_xor_sync(0xffffffffu, best_i, o);
        if (ranks_before(os, oi, best_s, best_i)) {
          best_s = os;
          best_i = oi;
        }
      }
      if ((best_i & 31) == lane) taken |= 1u << (best_i >> 5);
      if (lane == j) my_idx = best_i;
    }
    if (lane < k) tk[lane] = my_idx;
  }
  const float l = weight_logit(row, lane, k, W, E, my_idx);
  const float p = router_prob(l, lane, W);
  if (lane < W) weights[n * W + lane] = p * (route_scale * global_scale[0]);
}

__global__ void router_backward_kernel(const float* logits, const int32_t* topk, const float* global_scale,
                                       const float* dweights, int64_t N, int E, int S, int k, double route_scale,
                                       float* dlogits, float* dgs_partials) {
  __shared__ double s_dgs[kWarpsPerBlock];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t n = blockIdx.x * int64_t(kWarpsPerBlock) + warp;
  const int X = E + S, W = k + S;
  double dgs = 0;
  if (n < N) {
    const float* row = logits + n * X;
    float* drow = dlogits + n * X;
    const int32_t idx = lane < k ? topk[n * k + lane] : 0;
    // A row naming an expert outside [0, E) is skipped (the forward checked the choice; ops/router.h).
    if (!__any_sync(0xffffffffu, idx < 0 || idx >= E)) {
      for (int c = lane; c < X; c += 32) drow[c] = 0.f;
      __syncwarp();
      const float l = weight_logit(row, lane, k, W, E, idx);
      const float p = router_prob(l, lane, W);
      const double C = route_scale * static_cast<double>(global_scale[0]);
      const double dw = lane < W ? static_cast<double>(dweights[n * W + lane]) : 0.0;
      const double dp = dw * C;
      double p_dot_dp = p * dp;
      for (int o = 16; o > 0; o >>= 1) p_dot_dp += __shfl_xor_sync(0xffffffffu, p_dot_dp, o);
      dgs = dw * route_scale * p;
      for (int o = 16; o > 0; o >>= 1) dgs += __shfl_xor_sync(0xffffffffu, dgs, o);
      // A replayed routing may name an expert twice in one row: the slots of a column add up, in slot
      // order (issue 24: not atomics in arrival order), and the column's first slot stores the sum.
      const int col = lane < W ? (lane < k ? idx : E + (lane - k)) : -1;
      const float mine = lane < W ? static_cast<float>(p * (dp - p_dot_dp) * sigmoid_f32(-l)) : 0.f;
      float sum = 0.f;
      bool first = true;
      for (int j = 0; j < W; ++j) {
        const int cj = __shfl_sync(0xffffffffu, col, j);
        const float vj = __shfl_sync(0xffffffffu, mine, j);
        if (cj == col) {
          first = first && j >= lane;
          sum += vj;
        }
      }
      if (lane < W && first) drow[col] = sum;  // the row was zeroed above: 0 + the slots, as before
    }
  }
  if (lane == 0) s_dgs[warp] = dgs;
  __syncthreads();
  if (threadIdx.x == 0) {
    double s = 0;
    for (int i = 0; i < kWarpsPerBlock; ++i) s += s_dgs[i];
    dgs_partials[blockIdx.x] = static_cast<float>(s);  // added in block order after the kernel
  }
}

void check_params(const char* op, const RouterParams& params) {
  QUILL_CHECK(params.n_routed > 0, "{}: n_routed is {}, expected > 0", op, params.n_routed);
  QUILL_CHECK(params.n_shared >= 0, "{}: n_shared is {}, expected >= 0", op, params.n_shared);
  QUILL_CHECK(params.top_k > 0 && params.top_k <= params.n_routed, "{}: top_k is {}, expected 1..{} (n_routed)", op,
              params.top_k, params.n_routed);
  QUILL_CHECK(params.top_k + params.n_shared <= kMaxW,
              "{}: top_k + n_shared is {}, the CUDA kernel supports at most {} weights per token", op,
              params.top_k + params.n_shared, kMaxW);
  QUILL_CHECK(std::isfinite(params.route_scale), "{}: route_scale must be finite, got {}", op, params.route_scale);
}

// Shapes, dtypes and devices common to forward and backward; returns N.
int64_t check_router_tensors(const char* op, const Tensor& logits_NX, const Tensor& topk_idx_Nk,
                             const Tensor& weights_NW, const Tensor& global_scale, const RouterParams& params) {
  check_params(op, params);
  const int64_t E = params.n_routed, S = params.n_shared, k = params.top_k;
  QUILL_CHECK(logits_NX.defined() && logits_NX.ndim() == 2, "{}: logits_NX must be 2-D [N, {}], got {}", op, E + S,
              logits_NX.defined() ? shape_str(logits_NX.shape()) : std::string("(undefined)"));
  const int64_t N = logits_NX.dim(0);
  require_shape(op, "logits_NX", logits_NX, {N, E + S});
  require_dtype(op, "logits_NX", logits_NX, DType::F32);
  require_shape(op, "topk_idx_Nk", topk_idx_Nk, {N, k});
  require_dtype(op, "topk_idx_Nk", topk_idx_Nk, DType::I32);
  require_shape(op, "weights_NW", weights_NW, {N, k + S});
  require_dtype(op, "weights_NW", weights_NW, DType::F32);
  require_shape(op, "global_scale", global_scale, {1});
  require_dtype(op, "global_scale", global_scale, DType::F32);
  for (auto [name, t] : {std::pair<const char*, const Tensor*>{"logits_NX", &logits_NX}, {"topk_idx_Nk", &topk_idx_Nk},
                         {"weights_NW", &weights_NW}, {"global_scale", &global_scale}})
    require_device(op, name, *t);
  QUILL_CHECK(N * k <= INT_MAX, "{}: {} tokens x top_k {} exceed the I32 index range", op, N, k);
  return N;
}

unsigned row_blocks(int64_t N) { return static_cast<unsigned>((N + kWarpsPerBlock - 1) / kWarpsPerBlock); }

// A device word for the first bad topk element, set to UINT_MAX.
Tensor new_flag(const DeviceContext& ctx) {
  Tensor flag = Tensor::empty({1}, DType::I32, *ctx.allocator);
  QUILL_CUDA_CHECK(cudaMemsetAsync(flag.data(), 0xff, sizeof(unsigned), stream_of(ctx)));
  return flag;
}

// Synchronises; throws naming the first topk element outside [0, E).
void report_bad_topk(const char* op, const DeviceContext& ctx, const Tensor& flag, const Tensor& topk_idx_Nk,
                     int64_t E) {
  cudaStream_t stream = stream_of(ctx);
  unsigned bad = UINT_MAX;
  QUILL_CUDA_CHECK(cudaMemcpyAsync(&bad, flag.data(), sizeof(unsigned), cudaMemcpyDeviceToHost, stream));
  QUILL_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (bad == UINT_MAX) return;
  int32_t expert = 0;
  QUILL_CUDA_CHECK(cudaMemcpy(&expert, topk_idx_Nk.data_as<int32_t>() + bad, sizeof(expert), cudaMemcpyDeviceToHost));
  QUILL_FAIL("{}: topk_idx_Nk element {} is expert {}, outside [0, {})", op, bad, expert, E);
}

void launch_forward(const DeviceContext& ctx, const Tensor& logits_NX, const Tensor& bias_E,
                    const Tensor& global_scale, const RouterParams& params, bool replay, const Tensor& topk_idx_Nk,
                    const Tensor& weights_NW, unsigned* first_bad) {
  const int64_t N = logits_NX.dim(0);
  const int E = static_cast<int>(params.n_routed), S = static_cast<int>(params.n_shared);
  const int k = static_cast<int>(params.top_k);
  const float* bias = replay ? nullptr : bias_E.data_as<float>();
  const float route_scale = static_cast<float>(params.route_scale);
  auto launch = [&](auto kernel) {
    kernel<<<row_blocks(N), kWarpsPerBlock * 32, 0, stream_of(ctx)>>>(
        logits_NX.data_as<float>(), bias, global_scale.data_as<float>(), N, E, S, k, route_scale, replay,
        topk_idx_Nk.data_as<int32_t>(), weights_NW.data_as<float>(), first_bad);
  };
  // Replay never reads the per-lane candidates, so the smallest instance serves it.
  const int per = replay ? 1 : (E + 31) / 32;
  if (per <= 1) launch(router_forward_kernel<1>);
  else if (per <= 2) launch(router_forward_kernel<2>);
  else if (per <= 4) launch(router_forward_kernel<4>);
  else if (per <= 8) launch(router_forward_kernel<8>);
  else if (per <= 16) launch(router_forward_kernel<16>);
  else launch(router_forward_kernel<32>);
  QUILL_CUDA_CHECK_LAUNCH("router_forward_kernel");
}

}  // namespace

void router_forward(const DeviceContext& ctx, const Tensor& logits_NX, const Tensor& bias_E, const Tensor& global_scale,
                    const RouterParams& params, const Tensor& topk_idx_Nk, const Tensor& weights_NW) {
  const char* op = "router_forward";
  const int64_t N = check_router_tensors(op, logits_NX, topk_idx_Nk, weights_NW, global_scale, params);
  require_shape(op, "bias_E", bias_E, {params.n_routed});
  require_dtype(op, "bias_E", bias_E, DType::F32);
  require_device(op, "bias_E", bias_E);
  QUILL_CHECK(params.n_routed <= 32 * 32, "{}: n_routed is {}; the CUDA kernel selects among at most 1024", op,
              params.n_routed);
  if (N == 0) return;
  launch_forward(ctx, logits_NX, bias_E, global_scale, params, false, topk_idx_Nk, weights_NW, nullptr);
}

void router_forward_replay(const DeviceContext& ctx, const Tensor& logits_NX, const Tensor& global_scale,
                           const RouterParams& params, const Tensor& topk_idx_Nk, const Tensor& weights_NW) {
  const char* op = "router_forward_replay";
  const int64_t N = check_router_tensors(op, logits_NX, topk_idx_Nk, weights_NW, global_scale, params);
  if (N == 0) return;
  Tensor flag = new_flag(ctx);
  launch_forward(ctx, logits_NX, Tensor(), global_scale, params, true, topk_idx_Nk, weights_NW,
                 static_cast<unsigned*>(flag.data()));
  report_bad_topk(op, ctx, flag, topk_idx_Nk, params.n_routed);
}

void router_backward(const DeviceContext& ctx, const Tensor& logits_NX, const Tensor& topk_idx_Nk,
                     const Tensor& weights_NW, const Tensor& global_scale, const RouterParams& params,
                     const Tensor& dweights_NW, const Tensor& dlogits_NX, const Tensor& dglobal_scale) {
  const char* op = "router_backward";
  const int64_t N = check_router_tensors(op, logits_NX, topk_idx_Nk, weights_NW, global_scale, params);
  require_shape(op, "dweights_NW", dweights_NW, weights_NW.shape());
  require_dtype(op, "dweights_NW", dweights_NW, DType::F32);
  require_shape(op, "dlogits_NX", dlogits_NX, logits_NX.shape());
  require_dtype(op, "dlogits_NX", dlogits_NX, DType::F32);
  require_shape(op, "dglobal_scale", dglobal_scale, {1});
  require_dtype(op, "dglobal_scale", dglobal_scale, DType::F32);
  require_device(op, "dweights_NW", dweights_NW);
  require_device(op, "dlogits_NX", dlogits_NX);
  require_device(op, "dglobal_scale", dglobal_scale);
  if (N == 0) return;
  const unsigned blocks = row_blocks(N);
  Tensor partials = Tensor::empty({static_cast<int64_t>(blocks)}, DType::F32, *ctx.allocator);
  router_backward_kernel<<<blocks, kWarpsPerBlock * 32, 0, stream_of(ctx)>>>(
      logits_NX.data_as<float>(), topk_idx_Nk.data_as<int32_t>(), global_scale.data_as<float>(),
      dweights_NW.data_as<float>(), N, static_cast<int>(params.n_routed), static_cast<int>(params.n_shared),
      static_cast<int>(params.top_k), params.route_scale, dlogits_NX.data_as<float>(), partials.data_as<float>());
  QUILL_CUDA_CHECK_LAUNCH("router_backward_kernel");
  // The global scale's gradient: the blocks' sums in block order (issue 24: no float atomics).
  add_partials_in_order(stream_of(ctx), partials.data_as<float>(), blocks, 1, dglobal_scale.data_as<float>());
  // No check of topk_idx_Nk here (ops/router.h): the forward checked it, and a synchronisation per MoE layer and
  // micro-batch kept the GPU idle ~50 us each (issue 40's stage profiles: 5-7 ms per 8 micro-batches).
}

}  // namespace quill::cuda
