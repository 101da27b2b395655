// CUDA routed-expert token plumbing (ops/moe.h; dtypes: docs/decisions/cuda-precision.md): the route
// plan and token permutation. The grouped GEMMs live elsewhere.
//
// Legend: N tokens, k = top_k slots per token, E experts, P = N * k permuted rows, D the hidden width.
// An assignment a = token * k + slot; p(a) = slot_rows[a] its row in the order sorted by expert.
//   moe_route_plan: sorts the assignments stably by (expert, token, slot): slot_rows_Nk the rows, counts_E
//     the rows per expert. topk_idx_Nk and slot_rows_Nk I32 [N, k] on the device; counts_E I64 [E] in
//     host memory (one small copy back, which synchronises), or I64 [E + 1] on the device with the check
//     word last (no synchronisation: the caller copies it with what else it needs, ops/moe.h).
//   moe_permute:            xp[p(t, slot)] = x[t]                                 x_ND, xp_PD BF16
//   moe_permute_backward:   dx[t] = sum_slot dxp[p(t, slot)]  (overwritten)       dxp_PD, dx_ND BF16
//   moe_unpermute:          out[t] = sum_slot w[t, slot] * yp[p(t, slot)]         yp_PD, out_ND BF16; w F32
//   moe_unpermute_backward: dyp[p] = w[a] * dout[a / k];  dweights[a] = dout[a / k] . yp[p]
//                                                          dout, yp, dyp BF16; weights, dweights F32 [N, k]
// All sums in fp32, per token in slot order (deterministic: no atomics anywhere here).
// Layout: the plan is three kernels over chunks of kPlanChunk assignments (one block each): per-chunk expert
// histograms; one block that turns them into each (chunk, expert)'s first row (experts in order, chunks in
// order within an expert) and the counts; then every chunk places its assignments stably from those rows, in
// batches of a block, warp by warp in order, ranks within a warp from __match_any_sync. (Before: one block
// did everything, 0.47 ms per call on the H200 while the rest of the GPU idled; bench/results/2026-11-30-slice-v5.)
// The row ops are one block per token (16-byte accesses where D % 8 == 0 and the rows are aligned;
// see "row kernels"), so each token row of x, dx, out or dout is read or written once per op.
// Preconditions: every topk entry in [0, E) (an error naming [token, slot] otherwise, at the plan's one
// synchronisation). The row ops take slot_rows as the plan wrote it, a permutation of [0, P), and do not
// synchronise to check it (they did, once per call, building the inverse of the former perm_P: four host
// round trips per MoE layer and micro-batch); a row outside [0, P) is skipped, never written or read.
#include <algorithm>
#include <climits>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "ops/cuda/bf16_units.cuh"
#include "ops/cuda/cuda_resources.h"
#include "ops/cuda/kernels.h"
#include "ops/dispatch.h"

namespace quill::cuda {
namespace {

using ops_detail::require_dtype;
using ops_detail::require_shape;

constexpr int kMaxRowThreads = 256;
constexpr int64_t kMaxPlanExperts = 8 * 1024;  // the cursors live in (at most 32 KB of) shared memory

void require_device(const char* op, const char* name, const Tensor& t) {
  QUILL_CHECK(t.defined() && t.device() == Device::CUDA, "{}: {} must be in GPU memory, got {}", op, name,
              t.defined() ? t.describe() : std::string("(undefined)"));
}

void require_2d(const char* op, const char* name, const Tensor& t) {
  QUILL_CHECK(t.defined() && t.ndim() == 2, "{}: {} must be 2-D, got {}", op, name,
              t.defined() ? shape_str(t.shape()) : std::string("(undefined)"));
}

// ---- route plan -------------------------------------------------------------------------------

constexpr int kPlanChunk = 2048;       // assignments per chunk (one block each)
static_assert(ops::kRoutePlanAllInRange == UINT_MAX, "the device form's check word is the low word's UINT_MAX");
constexpr int kPlanBlockThreads = 512;  // threads of the histogram and placement blocks

// hist[c * E + e] = assignments of chunk c routed to expert e; first_bad = the smallest assignment whose
// expert is outside [0, E).
__global__ void __launch_bounds__(kPlanBlockThreads)
    plan_histogram_kernel(const int32_t* topk, int64_t P, int E, int* hist, unsigned* first_bad) {
  extern __shared__ int count[];  // [E]
  for (int e = threadIdx.x; e < E; e += blockDim.x) count[e] = 0;
  __syncthreads();
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * kPlanChunk, end = min(P, begin + kPlanChunk);
  for (int64_t a = begin + threadIdx.x; a < end; a += blockDim.x) {
    const int e = topk[a];
    if (e < 0 || e >= E) atomicMin(first_bad, static_cast<unsigned>(a));
    else atomicAdd(&count[e], 1);
  }
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += blockDim.x) hist[static_cast<int64_t>(blockIdx.x) * E + e] = count[e];
}

// One block: counts[e] = sum over chunks; first[c * E + e] = the row where chunk c's first assignment to
// expert e goes = (rows of experts < e) + (chunk c' < c assignments to e).
__global__ void __launch_bounds__(1024)
    plan_offsets_kernel(const int* hist, int chunks, int E, long long* counts, int* first, const unsigned* first_bad) {
  extern __shared__ int base[];  // [E]: rows of experts before e
  if (*first_bad != UINT_MAX) return;
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    int total = 0;
    for (int c = 0; c < chunks; ++c) total += hist[static_cast<int64_t>(c) * E + e];
    counts[e] = total;
    base[e] = total;
  }
  __syncthreads();
  if (threadIdx.x == 0) {  // E is at most kMaxPlanExperts: a serial scan costs microseconds
    int off = 0;
    for (int e = 0; e < E; ++e) {
      const int n = base[e];
      base[e] = off;
      off += n;
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    int row = base[e];
    for (int c = 0; c < chunks; ++c) {
      first[static_cast<int64_t>(c) * E + e] = row;
      row += hist[static_cast<int64_t>(c) * E + e];
    }
  }
}

// Chunk blockIdx.x: slot_rows[a] = the row of each of its assignments, stable within the chunk (batches in
// order, warps of a batch in order, lanes of a warp in order), starting from first[chunk, e].
__global__ void __launch_bounds__(kPlanBlockThreads)
    plan_place_kernel(const int32_t* topk, int64_t P, int E, const int* first, const unsigned* first_bad,
                      int32_t* slot_rows) {
  extern __shared__ int cursor[];  // [E]: each expert's next free row
  if (*first_bad != UINT_MAX) return;  // uniform
  for (int e = threadIdx.x; e < E; e += blockDim.x) cursor[e] = first[static_cast<int64_t>(blockIdx.x) * E + e];
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * kPlanChunk, end = min(P, begin + kPlanChunk);
  for (int64_t batch = begin; batch < end; batch += blockDim.x) {
    const int64_t a = batch + threadIdx.x;
    const bool valid = a < end;
    const int e = valid ? topk[a] : -1;
    for (int w = 0; w < n_warps; ++w) {
      if (warp == w) {
        const unsigned active = __ballot_sync(0xffffffffu, valid);
        if (valid) {
          const unsigned same = __match_any_sync(active, e);
          const int rank = __popc(same & ((1u << lane) - 1u));
          slot_rows[a] = cursor[e] + rank;
          __syncwarp(active);
          if (lane == 31 - __clz(same)) cursor[e] += __popc(same);
        }
      }
      __syncthreads();
    }
  }
}

// ---- row kernels --------------------------------------------------------------------------------
//
// One block per token t, its slots' rows p(t, s) = rows[t * k + s]. A row is C = D / kW units
// (bf16_units.cuh: kW = 8, one 16-byte access, when D % 8 == 0 and the rows are 16-byte aligned;
// kW = 1 otherwise); thread i takes units i, i + blockDim, ... Each row of x / dout is read once
// (not once per slot), and a thread issues the loads of up to kSlotBatch slots before using any, so
// that ~100 bytes per thread are in flight.

constexpr int kSlotBatch = 8;
using units::Bf16Unit;
using units::load_unit;
using units::store_unit;

// Token t's slot s's row, or -1 when it is outside [0, P) (see the preconditions: skipped, never touched).
__device__ __forceinline__ int64_t slot_row(const int32_t* rows, int64_t t, int k, int s, int64_t P) {
  const int64_t p = rows[t * k + s];
  return p >= 0 && p < P ? p : -1;
}

// xp[p(t, s)] = x[t] for every slot s: one read of x[t], k copies.
template <int kW>
__global__ void permute_kernel(const __nv_bfloat16* x, const int32_t* rows, int k, int64_t D, int64_t P,
                               __nv_bfloat16* xp) {
  const int64_t t = blockIdx.x, C = D / kW;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const Bf16Unit<kW> v = load_unit<kW>(x + t * D + c * kW);
    for (int s = 0; s < k; ++s) {
      const int64_t p = slot_row(rows, t, k, s, P);
      if (p >= 0) store_unit<kW>(xp + p * D + c * kW, v);
    }
  }
}

// out[t] = sum over slots s in order of src[p(t, s)], scaled by w[t, s] when kWeighted (moe_unpermute;
// moe_permute_backward otherwise). fp32 from 0, one rounding at the end: the same operations in the same
// order as one thread per element, so the results are bit-identical to that.
template <int kW, bool kWeighted>
__global__ void gather_slots_kernel(const __nv_bfloat16* src, const int32_t* rows, const float* w, int k, int64_t D,
                                    int64_t P, __nv_bfloat16* out) {
  const int64_t t = blockIdx.x, C = D / kW;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    float acc[kW];
#pragma unroll
    for (int e = 0; e < kW; ++e) acc[e] = 0.f;
    for (int s0 = 0; s0 < k; s0 += kSlotBatch) {
      Bf16Unit<kW> v[kSlotBatch];
      int64_t p[kSlotBatch];  // each slot's row, read once; -1 past k or out of range
#pragma unroll
      for (int i = 0; i < kSlotBatch; ++i) {
        p[i] = s0 + i < k ? slot_row(rows, t, k, s0 + i, P) : -1;
        if (p[i] >= 0) v[i] = load_unit<kW>(src + p[i] * D + c * kW);
      }
#pragma unroll
      for (int i = 0; i < kSlotBatch; ++i) {
        if (s0 + i >= k) break;
        if (p[i] < 0) continue;
        if constexpr (kWeighted) {
          const float ws = w[t * k + s0 + i];
#pragma unroll
          for (int e = 0; e < kW; ++e) acc[e] = fmaf(ws, v[i][e], acc[e]);
        } else {
#pragma unroll
          for (int e = 0; e < kW; ++e) acc[e] += v[i][e];
        }
      }
    }
    store_unit<kW>(out + t * D + c * kW, acc);
  }
}

// For each slot s of token t, p = p(t, s): dyp[p] = w[t, s] * dout[t] and dweights[t, s] = dout[t] . yp[p].
// dout[t] is read once per batch of kSlotBatch slots (once for k <= 8). Each dot product: per thread in
// unit order, then warp shuffles, then the warp sums in order (deterministic).
template <int kW>
__global__ void __launch_bounds__(kMaxRowThreads)
    unpermute_backward_kernel(const __nv_bfloat16* dout, const __nv_bfloat16* yp, const int32_t* rows, const float* w,
                              int k, int64_t D, int64_t P, __nv_bfloat16* dyp, float* dweights) {
  __shared__ float part[kSlotBatch][kMaxRowThreads / 32];
  const int64_t t = blockIdx.x, C = D / kW;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  for (int s0 = 0; s0 < k; s0 += kSlotBatch) {
    const int n_slots = min(kSlotBatch, k - s0);
    float dot[kSlotBatch];
#pragma unroll
    for (int i = 0; i < kSlotBatch; ++i) dot[i] = 0.f;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      const Bf16Unit<kW> g = load_unit<kW>(dout + t * D + c * kW);
      Bf16Unit<kW> y[kSlotBatch];
      int64_t p[kSlotBatch];  // each slot's row, read once; -1 past the batch or out of range
#pragma unroll
      for (int i = 0; i < kSlotBatch; ++i) {
        p[i] = i < n_slots ? slot_row(rows, t, k, s0 + i, P) : -1;
        if (p[i] >= 0) y[i] = load_unit<kW>(yp + p[i] * D + c * kW);
      }
#pragma unroll
      for (int i = 0; i < kSlotBatch; ++i) {
        if (i >= n_slots) break;
        if (p[i] < 0) continue;
        const float wa = w[t * k + s0 + i];
        float out[kW];
#pragma unroll
        for (int e = 0; e < kW; ++e) {
          out[e] = wa * g[e];
          dot[i] = fmaf(g[e], y[i][e], dot[i]);
        }
        store_unit<kW>(dyp + p[i] * D + c * kW, out);
      }
    }
#pragma unroll
    for (int i = 0; i < kSlotBatch; ++i) {
      const float v = units::warp_sum(dot[i]);
      if (lane == 0) part[i][warp] = v;
    }
    __syncthreads();
    if (threadIdx.x < n_slots) {
      float s = 0.f;
      for (int q = 0; q < n_warps; ++q) s += part[threadIdx.x][q];
      dweights[t * k + s0 + threadIdx.x] = s;
    }
    __syncthreads();  // part is rewritten by the next batch
  }
}

// Threads per token block: one per unit up to kMaxRowThreads, whole warps (the dot products' warp sums).
unsigned row_threads(int64_t units_per_row) {
  return static_cast<unsigned>(std::clamp<int64_t>(units::ceil_div(units_per_row, 32) * 32, 32, kMaxRowThreads));
}

bool vec_rows(int64_t D, std::initializer_list<const void*> bf16_data) {
  if (D % units::kVec != 0) return false;
  for (const void* p : bf16_data)
    if (!units::aligned16(p)) return false;
  return true;
}

void require_bf16_on_device(const char* op, const char* name, const Tensor& t) {
  require_dtype(op, name, t, DType::BF16);
  require_device(op, name, t);
}

}  // namespace

void moe_route_plan(const DeviceContext& ctx, const Tensor& topk_idx_Nk, int64_t n_experts, const Tensor& slot_rows_Nk,
                    const Tensor& counts_E) {
  const char* op = "moe_route_plan";
  require_2d(op, "topk_idx_Nk", topk_idx_Nk);
  require_dtype(op, "topk_idx_Nk", topk_idx_Nk, DType::I32);
  require_device(op, "topk_idx_Nk", topk_idx_Nk);
  QUILL_CHECK(n_experts > 0, "{}: n_experts is {}, expected > 0", op, n_experts);
  QUILL_CHECK(n_experts <= kMaxPlanExperts, "{}: n_experts is {}; the CUDA kernel supports at most {}", op, n_experts,
              kMaxPlanExperts);
  const int64_t P = topk_idx_Nk.numel();
  QUILL_CHECK(P < INT_MAX, "{}: {} assignments do not fit the I32 slot_rows_Nk", op, P);
  require_shape(op, "slot_rows_Nk", slot_rows_Nk, topk_idx_Nk.shape());
  require_dtype(op, "slot_rows_Nk", slot_rows_Nk, DType::I32);
  require_device(op, "slot_rows_Nk", slot_rows_Nk);
  // Host counts [E]: synchronise and check here. Device counts [E + 1] (ops/moe.h): the counts and the check word
  // stay on the device for the caller's one copy.
  const bool on_device = counts_E.defined() && counts_E.device() == Device::CUDA;
  require_shape(op, "counts_E", counts_E, {on_device ? n_experts + 1 : n_experts});
  require_dtype(op, "counts_E", counts_E, DType::I64);
  cudaStream_t stream = stream_of(ctx);
  if (P == 0) {
    if (on_device) {
      const long long none[1] = {ops::kRoutePlanAllInRange};
      QUILL_CUDA_CHECK(cudaMemsetAsync(counts_E.data(), 0, n_experts * sizeof(long long), stream));
      QUILL_CUDA_CHECK(cudaMemcpyAsync(counts_E.data_as<int64_t>() + n_experts, none, sizeof(none),
                                       cudaMemcpyHostToDevice, stream));
    } else {
      std::fill(counts_E.data_as<int64_t>(), counts_E.data_as<int64_t>() + n_experts, int64_t{0});
    }
    return;
  }
  // Device scratch: (host form) E counts, then the first bad assignment in the low word of one more int64; then
  // the per-chunk histograms and first rows (int32, chunks x E each). The device form's counts and check word are
  // the output's own: zeroed first (a bad plan exchanges zero counts), the check word's low half all ones.
  const int E = static_cast<int>(n_experts);
  const int chunks = static_cast<int>((P + kPlanChunk - 1) / kPlanChunk);
  const int64_t chunk_ints = static_cast<int64_t>(chunks) * E;
  const int64_t own_counts = on_device ? 0 : n_experts + 1;
  Tensor scratch = Tensor::empty({own_counts + (chunk_ints + 1) / 2 * 2}, DType::I64, *ctx.allocator);
  long long* d_counts = on_device ? static_cast<long long*>(counts_E.data()) : static_cast<long long*>(scratch.data());
  unsigned* first_bad = reinterpret_cast<unsigned*>(d_counts + n_experts);  // little-endian: the low word
  int* hist = reinterpret_cast<int*>(static_cast<long long*>(scratch.data()) + own_counts);
  int* first = hist + chunk_ints;
  if (on_device) QUILL_CUDA_CHECK(cudaMemsetAsync(d_counts, 0, (n_experts + 1) * sizeof(long long), stream));
  QUILL_CUDA_CHECK(cudaMemsetAsync(first_bad, 0xff, sizeof(unsigned), stream));
  const size_t smem = E * sizeof(int);
  const int32_t* topk = topk_idx_Nk.data_as<int32_t>();
  plan_histogram_kernel<<<chunks, kPlanBlockThreads, smem, stream>>>(topk, P, E, hist, first_bad);
  QUILL_CUDA_CHECK_LAUNCH("plan_histogram_kernel");
  plan_offsets_kernel<<<1, 1024, smem, stream>>>(hist, chunks, E, d_counts, first, first_bad);
  QUILL_CUDA_CHECK_LAUNCH("plan_offsets_kernel");
  plan_place_kernel<<<chunks, kPlanBlockThreads, smem, stream>>>(topk, P, E, first, first_bad,
                                                                 slot_rows_Nk.data_as<int32_t>());
  QUILL_CUDA_CHECK_LAUNCH("plan_place_kernel");
  if (on_device) return;
  std::vector<long long> host(static_cast<size_t>(n_experts + 1));
  QUILL_CUDA_CHECK(cudaMemcpyAsync(host.data(), d_counts, (n_experts + 1) * sizeof(long long), cudaMemcpyDeviceToHost,
                                   stream));
  QUILL_CUDA_CHECK(cudaStreamSynchronize(stream));
  unsigned bad = 0;
  std::memcpy(&bad, &host[static_cast<size_t>(n_experts)], sizeof(bad));
  ops::moe_route_plan_check(ctx, topk_idx_Nk, n_experts, bad);  // names a bad expert
  int64_t* counts = counts_E.data_as<int64_t>();
  for (int64_t e = 0; e < n_experts; ++e) counts[e] = host[static_cast<size_t>(e)];
}

// slot_rows_Nk: I32 [n_tokens, k] on the device (its values are the plan's; see the preconditions); returns k.
int64_t slot_rows_on_device(const char* op, const Tensor& slot_rows_Nk, int64_t n_tokens, int64_t k = -1) {
  k = ops_detail::require_slot_rows(op, slot_rows_Nk, n_tokens, k);
  require_device(op, "slot_rows_Nk", slot_rows_Nk);
  return k;
}

void moe_permute(const DeviceContext& ctx, const Tensor& x_ND, const Tensor& slot_rows_Nk, const Tensor& xp_PD) {
  const char* op = "moe_permute";
  require_2d(op, "x_ND", x_ND);
  const int64_t N = x_ND.dim(0), D = x_ND.dim(1);
  require_bf16_on_device(op, "x_ND", x_ND);
  const int64_t top_k = slot_rows_on_device(op, slot_rows_Nk, N), P = N * top_k;
  require_shape(op, "xp_PD", xp_PD, {P, D});
  require_bf16_on_device(op, "xp_PD", xp_PD);
  if (P == 0 || D == 0) return;
  const __nv_bfloat16* x = x_ND.data_as<__nv_bfloat16>();
  __nv_bfloat16* xp = xp_PD.data_as<__nv_bfloat16>();
  const int32_t* rows = slot_rows_Nk.data_as<int32_t>();
  const int k = static_cast<int>(top_k);
  const bool vec = vec_rows(D, {x, xp});
  const unsigned blocks = static_cast<unsigned>(N), threads = row_threads(vec ? D / units::kVec : D);
  if (vec) permute_kernel<units::kVec><<<blocks, threads, 0, stream_of(ctx)>>>(x, rows, k, D, P, xp);
  else permute_kernel<1><<<blocks, threads, 0, stream_of(ctx)>>>(x, rows, k, D, P, xp);
  QUILL_CUDA_CHECK_LAUNCH("permute_kernel");
}

void moe_permute_backward(const DeviceContext& ctx, const Tensor& dxp_PD, const Tensor& slot_rows_Nk,
                          const Tensor& dx_ND) {
  const char* op = "moe_permute_backward";
  require_2d(op, "dx_ND", dx_ND);
  const int64_t N = dx_ND.dim(0), D = dx_ND.dim(1);
  require_bf16_on_device(op, "dx_ND", dx_ND);
  const int64_t top_k = slot_rows_on_device(op, slot_rows_Nk, N), P = N * top_k;
  require_shape(op, "dxp_PD", dxp_PD, {P, D});
  require_bf16_on_device(op, "dxp_PD", dxp_PD);
  if (N == 0 || D == 0) return;
  const __nv_bfloat16* dxp = dxp_PD.data_as<__nv_bfloat16>();
  __nv_bfloat16* dx = dx_ND.data_as<__nv_bfloat16>();
  const int32_t* rows = slot_rows_Nk.data_as<int32_t>();
  const int k = static_cast<int>(top_k);
  const bool vec = vec_rows(D, {dxp, dx});
  const unsigned blocks = static_cast<unsigned>(N), threads = row_threads(vec ? D / units::kVec : D);
  cudaStream_t stream = stream_of(ctx);
  if (vec) gather_slots_kernel<units::kVec, false><<<blocks, threads, 0, stream>>>(dxp, rows, nullptr, k, D, P, dx);
  else gather_slots_kernel<1, false><<<blocks, threads, 0, stream>>>(dxp, rows, nullptr, k, D, P, dx);
  QUILL_CUDA_CHECK_LAUNCH("gather_slots_kernel (moe_permute_backward)");
}

void moe_unpermute(const DeviceContext& ctx, const Tensor& yp_PD, const Tensor& slot_rows_Nk, const Tensor& weights_Nk,
                   const Tensor& out_ND) {
  const char* op = "moe_unpermute";
  require_2d(op, "weights_Nk", weights_Nk);
  require_2d(op, "out_ND", out_ND);
  const int64_t N = weights_Nk.dim(0), k = weights_Nk.dim(1), D = out_ND.dim(1);
  slot_rows_on_device(op, slot_rows_Nk, N, k);
  const int64_t P = N * k;
  require_shape(op, "yp_PD", yp_PD, {P, D});
  require_shape(op, "out_ND", out_ND, {N, D});
  require_bf16_on_device(op, "yp_PD", yp_PD);
  require_bf16_on_device(op, "out_ND", out_ND);
  require_dtype(op, "weights_Nk", weights_Nk, DType::F32);
  require_device(op, "weights_Nk", weights_Nk);
  if (N == 0 || D == 0) return;
  const __nv_bfloat16* yp = yp_PD.data_as<__nv_bfloat16>();
  __nv_bfloat16* out = out_ND.data_as<__nv_bfloat16>();
  const float* w = weights_Nk.data_as<float>();
  const int32_t* rows = slot_rows_Nk.data_as<int32_t>();
  const int ki = static_cast<int>(k);
  const bool vec = vec_rows(D, {yp, out});
  const unsigned blocks = static_cast<unsigned>(N), threads = row_threads(vec ? D / units::kVec : D);
  if (vec) gather_slots_kernel<units::kVec, true><<<blocks, threads, 0, stream_of(ctx)>>>(yp, rows, w, ki, D, P, out);
  else gather_slots_kernel<1, true><<<blocks, threads, 0, stream_of(ctx)>>>(yp, rows, w, ki, D, P, out);
  QUILL_CUDA_CHECK_LAUNCH("gather_slots_kernel (moe_unpermute)");
}

void moe_unpermute_backward(const DeviceContext& ctx, const Tensor& dout_ND, const Tensor& yp_PD,
                            const Tensor& slot_rows_Nk, const Tensor& weights_Nk, const Tensor& dyp_PD,
                            const Tensor& dweights_Nk) {
  const char* op = "moe_unpermute_backward";
  require_2d(op, "weights_Nk", weights_Nk);
  require_2d(op, "dout_ND", dout_ND);
  const int64_t N = weights_Nk.dim(0), k = weights_Nk.dim(1), D = dout_ND.dim(1);
  slot_rows_on_device(op, slot_rows_Nk, N, k);
  const int64_t P = N * k;
  require_shape(op, "dout_ND", dout_ND, {N, D});
  require_shape(op, "yp_PD", yp_PD, {P, D});
  require_shape(op, "dyp_PD", dyp_PD, {P, D});
  require_shape(op, "dweights_Nk", dweights_Nk, {N, k});
  require_bf16_on_device(op, "dout_ND", dout_ND);
  require_bf16_on_device(op, "yp_PD", yp_PD);
  require_bf16_on_device(op, "dyp_PD", dyp_PD);
  require_dtype(op, "weights_Nk", weights_Nk, DType::F32);
  require_device(op, "weights_Nk", weights_Nk);
  require_dtype(op, "dweights_Nk", dweights_Nk, DType::F32);
  require_device(op, "dweights_Nk", dweights_Nk);
  if (P == 0) return;  // D == 0 still writes dweights (zeros)
  const __nv_bfloat16* dout = dout_ND.data_as<__nv_bfloat16>();
  const __nv_bfloat16* yp = yp_PD.data_as<__nv_bfloat16>();
  __nv_bfloat16* dyp = dyp_PD.data_as<__nv_bfloat16>();
  const float* w = weights_Nk.data_as<float>();
  float* dw = dweights_Nk.data_as<float>();
  const int32_t* rows = slot_rows_Nk.data_as<int32_t>();
  const int ki = static_cast<int>(k);
  const bool vec = vec_rows(D, {dout, yp, dyp});
  const unsigned blocks = static_cast<unsigned>(N), threads = row_threads(vec ? D / units::kVec : D);
  cudaStream_t stream = stream_of(ctx);
  if (vec) unpermute_backward_kernel<units::kVec><<<blocks, threads, 0, stream>>>(dout, yp, rows, w, ki, D, P, dyp, dw);
  else unpermute_backward_kernel<1><<<blocks, threads, 0, stream>>>(dout, yp, rows, w, ki, D, P, dyp, dw);
  QUILL_CUDA_CHECK_LAUNCH("unpermute_backward_kernel");
}

}  // namespace quill::cuda
