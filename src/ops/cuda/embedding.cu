// CUDA embedding lookup and its backward (ops/embedding.h; dtypes: docs/decisions/cuda-precision.md).
//   forward:  out[t, :] = table[ids[t], :]                 table_VD BF16 [V, D], out_TD BF16 [T, D]
//   backward: dtable[ids[t], :] += dout[t, :]              dout_TD BF16 [T, D], dtable_VD F32 [V, D]
// Legend: V vocabulary rows, D model width, T tokens; ids_T I32 [T] in device memory.
// Preconditions: every id in [0, V). The ids live on the device, so a check kernel records the first
// bad position (one word per block of the check, no clearing pass), the host copies the words back
// (one synchronisation) and throws naming it, before anything is written; the backward checks the
// same way. The backward sorts the positions by id on the device (id_sort.h: a stable radix sort),
// then sums each id's rows in position order: no atomics, the same bits on every run (issue 24).
// (Its first form grouped them on the host and gave each id one warp: 5.3 ms a row on the slice's
// synthetic rows of few distinct ids against 0.23 ms for the atomics, bench/results/2026-12-04-determinism-cost.)
// Layout: a group of lanes per token row (a warp for D >= 256), moving 16-byte units of 8 bf16 when
// D % 8 == 0 and the bf16 tensor and the table (or dtable) are 16-byte aligned, one element
// otherwise; 4 units per lane in flight in the forward. Why: one 256-thread block per token with a serial copy loop (2-byte loads and 4-byte
// atomics in the backward) measured 38-74% of the copy ceiling (bench/results/2026-11-30-slice-v5).
#include <algorithm>
#include <climits>
#include <string>

#include "ops/cuda/bf16_units.cuh"
#include "ops/cuda/cuda_resources.h"
#include "ops/cuda/id_sort.h"
#include "ops/cuda/kernels.h"
#include "ops/dispatch.h"

namespace quill::cuda {
namespace {

using ops_detail::require_dtype;
using ops_detail::require_shape;

using units::Bf16Unit;
using units::load_unit;
using units::store_unit;
using units::zero_unit;

constexpr int kThreads = 256;
constexpr int kCheckBlocks = 64;  // id check: blocks (and words copied back) at most
constexpr int kRowUnits = 4;

void require_device(const char* op, const char* name, const Tensor& t) {
  QUILL_CHECK(t.defined() && t.device() == Device::CUDA, "{}: {} must be in GPU memory, got {}", op, name,
              t.defined() ? t.describe() : std::string("(undefined)"));
}

// partial[b] = the smallest position t of block b's share (t = b * blockDim.x + i + k * grid
// threads) with ids[t] outside [0, V), or UINT_MAX: every block writes its word, so the scratch
// needs no clearing first.
__global__ void check_ids_kernel(const int32_t* ids, int64_t n_tok, int64_t V, unsigned* partial) {
  __shared__ unsigned first;
  if (threadIdx.x == 0) first = UINT_MAX;
  __syncthreads();
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < n_tok; t += int64_t(gridDim.x) * blockDim.x) {
    const int32_t id = ids[t];
    if (id < 0 || id >= V) atomicMin(&first, static_cast<unsigned>(t));
  }
  __syncthreads();
  if (threadIdx.x == 0) partial[blockIdx.x] = first;
}

// Throws naming the first id outside [0, V); one small copy back and a stream synchronisation.
void check_ids(const char* op, const DeviceContext& ctx, const Tensor& ids_T, int64_t V) {
  const int64_t n_tok = ids_T.dim(0);
  if (n_tok == 0) return;
  cudaStream_t stream = stream_of(ctx);
  const int blocks = static_cast<int>(std::min<int64_t>((n_tok + kThreads - 1) / kThreads, kCheckBlocks));
  Tensor partial = Tensor::empty({blocks}, DType::I32, *ctx.allocator);
  check_ids_kernel<<<blocks, kThreads, 0, stream>>>(ids_T.data_as<int32_t>(), n_tok, V,
                                                    static_cast<unsigned*>(partial.data()));
  QUILL_CUDA_CHECK_LAUNCH("check_ids_kernel");
  unsigned firsts[kCheckBlocks];
  QUILL_CUDA_CHECK(cudaMemcpyAsync(firsts, partial.data(), blocks * sizeof(unsigned), cudaMemcpyDeviceToHost, stream));
  QUILL_CUDA_CHECK(cudaStreamSynchronize(stream));
  const unsigned bad = *std::min_element(firsts, firsts + blocks);
  if (bad == UINT_MAX) return;
  int32_t id = 0;
  QUILL_CUDA_CHECK(cudaMemcpy(&id, ids_T.data_as<int32_t>() + bad, sizeof(int32_t), cudaMemcpyDeviceToHost));
  QUILL_FAIL("{}: token id {} at position {} is outside the vocabulary [0, {})", op, id, bad, V);
}

// Rows as units of kW bf16 (bf16_units.cuh: one 16-byte access for kW = 8). A group of G lanes (a
// power of two <= 32, no wider than the row's units) owns a token row, lane k of the group taking
// units k, k + G, ... , kRowUnits per trip with every load of the trip issued before its stores or
// atomics (bytes in flight); a warp holds 32 / G rows at a time; one resident wave of blocks strides
// over the tokens.
int row_group(int64_t units_per_row) {
  int g = 1;
  while (g < 32 && g < units_per_row) g *= 2;
  return g;
}

// out[t, :] = table[ids[t], :] (bits copied).
template <int kW>
__global__ void __launch_bounds__(kThreads) embedding_forward_kernel(const __nv_bfloat16* table, const int32_t* ids,
                                                                     int64_t n_tok, int64_t D, int G, int64_t begin,
                                                                     int64_t V, __nv_bfloat16* out) {
  const int lane = threadIdx.x & 31, k = lane & (G - 1), R = 32 / G;
  const int64_t units = D / kW, warps = int64_t(gridDim.x) * (blockDim.x >> 5);
  for (int64_t t = (blockIdx.x * int64_t(blockDim.x >> 5) + (threadIdx.x >> 5)) * R + lane / G; t < n_tok;
       t += warps * R) {
    // A vocab-parallel shard holds rows [begin, begin + V): another shard's id reads as zeros.
    const int64_t r = static_cast<int64_t>(ids[t]) - begin;
    const bool mine = r >= 0 && r < V;
    const __nv_bfloat16* src = table + (mine ? r : 0) * D;
    __nv_bfloat16* dst = out + t * D;
#pragma unroll 1
    for (int64_t u = k; u < units; u += int64_t(G) * kRowUnits) {
      Bf16Unit<kW> v[kRowUnits];
#pragma unroll
      for (int i = 0; i < kRowUnits; ++i)
        if (u + i * G < units) v[i] = mine ? load_unit<kW>(src + (u + i * G) * kW) : zero_unit<kW>();
#pragma unroll
      for (int i = 0; i < kRowUnits; ++i) {
        if (u + i * G >= units) break;
        store_unit<kW>(dst + (u + i * G) * kW, v[i]);
      }
    }
  }
}

// dtable[row, :] += the sum of dout[t, :] over the positions t of that row's id, in position order.
// keys / pos: the positions sorted by local row (id_sort.h), keys[p] == V outside the shard. A group
// of G lanes takes sorted index p when p starts a segment (its first position of one row) and walks
// the segment for one chunk of the row, G units wide (blockIdx.y: lane k of the group owns unit
// blockIdx.y * G + k): each (segment, unit) is one lane's, so no two lanes touch a table element and the
// sums need no atomics (issue 24: the same bits on every run). Chunks, not whole rows, per group:
// rows of few distinct ids (synthetic byte-tokenizer rows: ~100 ids in 8,192 positions) would otherwise
// leave a handful of warps walking long segments across all 4,096 columns. kW = 8 adds a unit as two
// 16-byte fp32 vectors (dtable 16-byte aligned), kW = 1 one element at a time.
template <int kW>
__global__ void __launch_bounds__(kThreads) embedding_backward_kernel(const int32_t* keys, const int32_t* pos,
                                                                      int64_t n, int64_t V,
                                                                      const __nv_bfloat16* dout, int64_t D, int G,
                                                                      float* dtable) {
  const int lane = threadIdx.x & 31, k = lane & (G - 1), R = 32 / G;
  const int64_t units = D / kW, warps = int64_t(gridDim.x) * (blockDim.x >> 5);
  const int64_t u = static_cast<int64_t>(blockIdx.y) * G + k;
  for (int64_t p0 = (blockIdx.x * int64_t(blockDim.x >> 5) + (threadIdx.x >> 5)) * R + lane / G; p0 < n;
       p0 += warps * R) {
    const int32_t key = keys[p0];
    if (key >= V || (p0 > 0 && keys[p0 - 1] == key) || u >= units) continue;
    int64_t p1 = p0 + 1;
    while (p1 < n && keys[p1] == key) ++p1;
    float acc[kW];
#pragma unroll
    for (int e = 0; e < kW; ++e) acc[e] = 0.f;
#pragma unroll 4  // the loads of several positions in flight; the adds stay in position order
    for (int64_t p = p0; p < p1; ++p) {
      const Bf16Unit<kW> v = load_unit<kW>(dout + static_cast<int64_t>(pos[p]) * D + u * kW);
#pragma unroll
      for (int e = 0; e < kW; ++e) acc[e] += v[e];
    }
    float* r = dtable + static_cast<int64_t>(key) * D + u * kW;
    if constexpr (kW == 8) {
      float4 a = *reinterpret_cast<float4*>(r), b = *reinterpret_cast<float4*>(r + 4);
      a.x += acc[0], a.y += acc[1], a.z += acc[2], a.w += acc[3];
      b.x += acc[4], b.y += acc[5], b.z += acc[6], b.w += acc[7];
      *reinterpret_cast<float4*>(r) = a;
      *reinterpret_cast<float4*>(r + 4) = b;
    } else {
      r[0] += acc[0];
    }
  }
}

// One resident wave of kThreads-thread blocks for a row kernel with groups of G lanes, no more than
// the tokens need.
template <typename Kernel>
unsigned row_blocks(const DeviceContext& ctx, Kernel kernel, int64_t n_tok, int G) {
  return units::resident_blocks(kernel, kThreads, 0, ctx.cuda->device, units::ceil_div(n_tok, kThreads / G));
}

template <int kW>
void launch_forward(const DeviceContext& ctx, const Tensor& table_VD, const Tensor& ids_T, int64_t begin,
                    const Tensor& out_TD) {
  const int64_t n_tok = ids_T.dim(0), D = table_VD.dim(1);
  const int G = row_group(D / kW);
  embedding_forward_kernel<kW><<<row_blocks(ctx, embedding_forward_kernel<kW>, n_tok, G), kThreads, 0, stream_of(ctx)>>>(
      table_VD.data_as<__nv_bfloat16>(), ids_T.data_as<int32_t>(), n_tok, D, G, begin, table_VD.dim(0),
      out_TD.data_as<__nv_bfloat16>());
}

template <int kW>
void launch_backward(const DeviceContext& ctx, const Tensor& ids_T, const Tensor& dout_TD, int64_t begin,
                     const Tensor& dtable_VD) {
  const int64_t n = ids_T.dim(0), V = dtable_VD.dim(0), D = dtable_VD.dim(1);
  Tensor keys, pos;
  sort_positions_by_id(ctx, ids_T, begin, V, keys, pos);
  const int G = row_group(D / kW);
  const int64_t chunks = units::ceil_div(D / kW, G);
  QUILL_CHECK(chunks <= 65535, "embedding_backward: rows of {} columns exceed the kernel's grid", D);
  const dim3 grid(row_blocks(ctx, embedding_backward_kernel<kW>, n, G), static_cast<unsigned>(chunks));
  embedding_backward_kernel<kW><<<grid, kThreads, 0, stream_of(ctx)>>>(
      keys.data_as<int32_t>(), pos.data_as<int32_t>(), n, V, dout_TD.data_as<__nv_bfloat16>(), D, G,
      dtable_VD.data_as<float>());
  // keys and pos are freed in stream order (the device allocator frees with cudaFreeAsync on this stream).
}

}  // namespace

void embedding_forward_shard(const DeviceContext& ctx, const Tensor& table_VD, const Tensor& ids_T, int64_t vocab_begin,
                             int64_t vocab_total, const Tensor& out_TD) {
  const char* op = "embedding_forward";
  QUILL_CHECK(table_VD.defined() && table_VD.ndim() == 2, "{}: table must be 2-D [V, D], got {}", op,
              table_VD.defined() ? table_VD.describe() : std::string("(undefined)"));
  const int64_t V = table_VD.dim(0), D = table_VD.dim(1);
  QUILL_CHECK(ids_T.defined() && ids_T.ndim() == 1, "{}: ids must be 1-D [T], got {}", op,
              ids_T.defined() ? ids_T.describe() : std::string("(undefined)"));
  const int64_t n_tok = ids_T.dim(0);
  require_shape(op, "out", out_TD, {n_tok, D});
  require_dtype(op, "table", table_VD, DType::BF16);
  require_dtype(op, "ids", ids_T, DType::I32);
  require_dtype(op, "out", out_TD, DType::BF16);
  require_device(op, "table", table_VD);
  require_device(op, "ids", ids_T);
  require_device(op, "out", out_TD);
  QUILL_CHECK(n_tok <= INT_MAX, "{}: {} tokens exceed the kernel's grid", op, n_tok);
  QUILL_CHECK(vocab_begin >= 0 && vocab_begin + V <= vocab_total, "{}: rows [{}, {}) are not inside a vocabulary of {}",
              op, vocab_begin, vocab_begin + V, vocab_total);
  check_ids(op, ctx, ids_T, vocab_total);
  if (n_tok == 0 || D == 0) return;
  if (D % units::kVec == 0 && units::aligned16(table_VD.data()) && units::aligned16(out_TD.data()))
    launch_forward<units::kVec>(ctx, table_VD, ids_T, vocab_begin, out_TD);
  else
    launch_forward<1>(ctx, table_VD, ids_T, vocab_begin, out_TD);
  QUILL_CUDA_CHECK_LAUNCH("embedding_forward_kernel");
}

void embedding_backward_shard(const DeviceContext& ctx, const Tensor& ids_T, const Tensor& dout_TD,
                              int64_t vocab_begin, int64_t vocab_total, const Tensor& dtable_VD) {
  const char* op = "embedding_backward";
  QUILL_CHECK(dtable_VD.defined() && dtable_VD.ndim() == 2, "{}: dtable must be 2-D [V, D], got {}", op,
              dtable_VD.defined() ? dtable_VD.describe() : std::string("(undefined)"));
  const int64_t V = dtable_VD.dim(0), D = dtable_VD.dim(1);
  QUILL_CHECK(ids_T.defined() && ids_T.ndim() == 1, "{}: ids must be 1-D [T], got {}", op,
              ids_T.defined() ? ids_T.describe() : std::string("(undefined)"));
  const int64_t n_tok = ids_T.dim(0);
  require_shape(op, "dout", dout_TD, {n_tok, D});
  require_dtype(op, "ids", ids_T, DType::I32);
  require_dtype(op, "dout", dout_TD, DType::BF16);
  require_dtype(op, "dtable", dtable_VD, DType::F32);
  require_device(op, "ids", ids_T);
  require_device(op, "dout", dout_TD);
  require_device(op, "dtable", dtable_VD);
  QUILL_CHECK(n_tok <= INT_MAX, "{}: {} tokens exceed the kernel's grid", op, n_tok);
  QUILL_CHECK(vocab_begin >= 0 && vocab_begin + V <= vocab_total, "{}: rows [{}, {}) are not inside a vocabulary of {}",
              op, vocab_begin, vocab_begin + V, vocab_total);
  check_ids(op, ctx, ids_T, vocab_total);
  if (n_tok == 0 || D == 0) return;
  if (D % units::kVec == 0 && units::aligned16(dout_TD.data()) && units::aligned16(dtable_VD.data()))
    launch_backward<units::kVec>(ctx, ids_T, dout_TD, vocab_begin, dtable_VD);
  else
    launch_backward<1>(ctx, ids_T, dout_TD, vocab_begin, dtable_VD);
  QUILL_CUDA_CHECK_LAUNCH("embedding_backward_kernel");
}

void embedding_forward(const DeviceContext& ctx, const Tensor& table_VD, const Tensor& ids_T, const Tensor& out_TD) {
  QUILL_CHECK(table_VD.defined() && table_VD.ndim() == 2, "embedding_forward: table must be 2-D [V, D], got {}",
              table_VD.defined() ? table_VD.describe() : std::string("(undefined)"));
  embedding_forward_shard(ctx, table_VD, ids_T, 0, table_VD.dim(0), out_TD);
}

void embedding_backward(const DeviceContext& ctx, const Tensor& ids_T, const Tensor& dout_TD, const Tensor& dtable_VD) {
  QUILL_CHECK(dtable_VD.defined() && dtable_VD.ndim() == 2, "embedding_backward: dtable must be 2-D [V, D], got {}",
              dtable_VD.defined() ? dtable_VD.describe() : std::string("(undefined)"));
  embedding_backward_shard(ctx, ids_T, dout_TD, 0, dtable_VD.dim(0), dtable_VD);
}

}  // namespace quill::cuda
