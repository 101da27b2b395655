// The router's gate GEMMs on the GPU (ops/router.h: router_gate_*), in fp32 arithmetic (docs/decisions/
// router-gemm-bf16x3.md):
//
//   forward and weight gradient, x bf16: the fp32 operand split into three bf16 parts that sum to it exactly
//           (bf16x3.h); x is bf16, so every product of parts is exact in fp32. bf16 cuBLASLt GEMMs over the parts at
//           once (stacked as one operand), each over a contraction of at most kChunk; chunk k's GEMM adds its fp32
//           result into the previous chunks' (beta 1: fl(sum + chunk), in chunk order), and the parts' sums are
//           added here in fp32 (round to nearest):
//     forward          y3 [T, 3Xp] = sum over k of x[:, chunk k] . Ws[:, chunk k]^T, Ws [3Xp, D] the gate's parts
//                      stacked by rows (hi, mid, lo, each padded to Xp rows with zeros);
//                      logits = (lo + mid) + hi of y3's blocks.
//     backward weight  s [3Xp, D] = sum over k of Ds[rows of chunk k]^T . x[rows of chunk k], Ds [T, 3Xp] dlogits'
//                      parts side by side; dw (+)= the same sum of s's blocks.
//           (Until 2026-12-06 each chunk wrote its own fp32 block and one kernel summed them in the same order: the
//           same sums, with a [chunks, T, 3Xp] or [chunks, 3Xp, D] round trip through memory.)
//   input gradient, and any fp32 x: cuBLASLt's fp32 GEMMs (gemm.cu). The input gradient's contraction is X = 258;
//           as parts both of its operands would split, six part pairs whose accumulation needs chunks with [T, D]
//           fp32 outputs costing more than the product.
//   Why the chunks, the parts' padding (Xp) and each op's transient bytes: ops/router_gate_layout.h, shared with the
//   memory plan (at a seed rank: T 2,048, D 4,096, X 258, 8 chunks of D and 4 of T, 13 MB forward, 16 MB weight
//   gradient, 32 MB input gradient, from the context's allocator).
//
// Shapes: x_TD [T, D] BF16 or F32, w_XD F32 [X, D], logits_TX / dlogits_TX F32 [T, X], dx_TD [T, D] BF16 or
// F32 (overwritten, rounded once from fp32), dw_XD F32 [X, D] (added to when accumulate, else overwritten).
#include <algorithm>
#include <cstdint>

#include "ops/cuda/bf16x3.h"
#include "ops/cuda/cuda_resources.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/lt_matmul.h"
#include "ops/cuda/tensor_checks.h"
#include "ops/dispatch.h"
#include "ops/router_gate_layout.h"

namespace quill::cuda {
namespace {

using ops_detail::require_dtype;
using ops_detail::require_shape;

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 8192;
using router_gate::kChunk;

int blocks_for(int64_t items) {
  return static_cast<int>(std::clamp<int64_t>((items + kThreads - 1) / kThreads, 1, kMaxBlocks));
}

// src [R, C] fp32 -> dst bf16 bits: block p = part p (0 hi, 1 mid, 2 lo), the blocks stacked by rows
// ([3 Rp, C]) or side by side by columns ([R, 3 Cp]); padding rows or columns are zero.
__global__ void split_kernel(const float* src, int64_t R, int64_t C, uint16_t* dst, int64_t dst_rows,
                             int64_t dst_cols, int64_t padded, bool by_rows) {
  const int64_t n = dst_rows * dst_cols;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t row = i / dst_cols, col = i % dst_cols;
    const int64_t b = (by_rows ? row : col) / padded;
    const int64_t r = by_rows ? row - b * padded : row, c = by_rows ? col : col - b * padded;
    dst[i] = (r < R && c < C) ? bf16x3::part_bits(src[r * C + c], static_cast<int>(b)) : uint16_t{0};
  }
}

// out [R, C] (+)= (lo + mid) + hi, part p (0 hi, 1 mid, 2 lo) at src[p * part_stride + r * row_stride + c], each
// already summed over the contraction's chunks by the GEMMs. In fp32 on the CUDA cores, rounded to nearest.
struct PartSums {
  int64_t row_stride, part_stride;
};
__global__ void sum_parts_kernel(const float* src, int64_t R, int64_t C, PartSums g, float* out, bool accumulate) {
  const int64_t n = R * C;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float* s = src + (i / C) * g.row_stride + i % C;
    const float total = (s[2 * g.part_stride] + s[g.part_stride]) + s[0];
    out[i] = accumulate ? out[i] + total : total;
  }
}

Tensor scratch(const DeviceContext& ctx, Shape shape, DType dtype) {
  return Tensor::empty(std::move(shape), dtype, *ctx.allocator);
}

// The split of an fp32 [R, C] matrix into its three parts (bf16, by rows or by columns, padded to 8).
Tensor split(const DeviceContext& ctx, const Tensor& src, bool by_rows) {
  const int64_t R = src.dim(0), C = src.dim(1);
  const int64_t padded = router_gate::padded(by_rows ? R : C);
  const int64_t rows = by_rows ? 3 * padded : R, cols = by_rows ? C : 3 * padded;
  Tensor dst = scratch(ctx, {rows, cols}, DType::BF16);
  split_kernel<<<blocks_for(rows * cols), kThreads, 0, stream_of(ctx)>>>(
      src.data_as<float>(), R, C, static_cast<uint16_t*>(dst.data()), rows, cols, padded, by_rows);
  QUILL_CUDA_CHECK_LAUNCH("split_kernel");
  return dst;
}

void sum_parts(const DeviceContext& ctx, const Tensor& src, const PartSums& g, const Tensor& out, bool accumulate) {
  const int64_t R = out.dim(0), C = out.dim(1);
  sum_parts_kernel<<<blocks_for(R * C), kThreads, 0, stream_of(ctx)>>>(src.data_as<float>(), R, C, g,
                                                                       static_cast<float*>(out.data()), accumulate);
  QUILL_CUDA_CHECK_LAUNCH("sum_parts_kernel");
}

void check_activation(const char* op, const char* name, const Tensor& t, const Shape& shape) {
  require_cuda(op, name, t);
  require_shape(op, name, t, shape);
  QUILL_CHECK(t.dtype() == DType::BF16 || t.dtype() == DType::F32, "{}: {} has dtype {}, expected BF16 or F32", op,
              name, dtype_name(t.dtype()));
}

void check_f32(const char* op, const char* name, const Tensor& t, const Shape& shape) {
  require_cuda(op, name, t);
  require_shape(op, name, t, shape);
  require_dtype(op, name, t, DType::F32);
}

}  // namespace

void router_gate_forward(const DeviceContext& ctx, const Tensor& x_TD, const Tensor& w_XD, const Tensor& logits_TX) {
  const char* op = "router_gate_forward";
  require_2d(op, "x", "[T, D]", x_TD);
  require_2d(op, "w", "[X, D]", w_XD);
  const int64_t T = x_TD.dim(0), D = x_TD.dim(1), X = w_XD.dim(0);
  check_activation(op, "x", x_TD, {T, D});
  check_f32(op, "w", w_XD, {X, D});
  check_f32(op, "logits", logits_TX, {T, X});
  if (x_TD.dtype() == DType::F32) return linear_forward(ctx, x_TD, w_XD, logits_TX);
  // Chunk k: y3 [T, 3Xp] (+)= x[:, k0:k1] . ws[:, k0:k1]^T, both operands strided views (ld D).
  const Tensor ws = split(ctx, w_XD, true);
  const int64_t M = ws.dim(0), Xp = M / 3;
  const int chunks = static_cast<int>(router_gate::chunks(D));
  Tensor y3 = scratch(ctx, {T, M}, DType::F32);
  const auto* xb = static_cast<const __nv_bfloat16*>(x_TD.data());
  const auto* wb = static_cast<const __nv_bfloat16*>(ws.data());
  for (int k = 0; k < chunks; ++k) {
    const int64_t k0 = k * kChunk, kc = std::min(kChunk, D - k0);
    matmul(ctx, op, CUBLAS_OP_T, Operand{wb + k0, CUDA_R_16BF, uint64_t(kc), uint64_t(M), D}, CUBLAS_OP_N,
           Operand{xb + k0, CUDA_R_16BF, uint64_t(kc), uint64_t(T), D}, y3.data(), CUDA_R_32F, uint64_t(M),
           uint64_t(T), uint64_t(kc), k > 0 ? 1.0f : 0.0f, Vary::kN);
  }
  sum_parts(ctx, y3, PartSums{M, Xp}, logits_TX, false);
}

void router_gate_backward_input(const DeviceContext& ctx, const Tensor& dlogits_TX, const Tensor& w_XD,
                                const Tensor& dx_TD) {
  const char* op = "router_gate_backward_input";
  require_2d(op, "dlogits", "[T, X]", dlogits_TX);
  require_2d(op, "w", "[X, D]", w_XD);
  const int64_t T = dlogits_TX.dim(0), X = dlogits_TX.dim(1), D = w_XD.dim(1);
  check_f32(op, "dlogits", dlogits_TX, {T, X});
  check_f32(op, "w", w_XD, {X, D});
  check_activation(op, "dx", dx_TD, {T, D});
  if (dx_TD.dtype() == DType::F32) return linear_backward_input(ctx, dlogits_TX, w_XD, dx_TD, false);
  Tensor dx32 = scratch(ctx, {T, D}, DType::F32);
  linear_backward_input(ctx, dlogits_TX, w_XD, dx32, false);
  convert(ctx, dx32, dx_TD);
}

void router_gate_backward_weight(const DeviceContext& ctx, const Tensor& dlogits_TX, const Tensor& x_TD,
                                 const Tensor& dw_XD, bool accumulate) {
  const char* op = "router_gate_backward_weight";
  require_2d(op, "dlogits", "[T, X]", dlogits_TX);
  require_2d(op, "x", "[T, D]", x_TD);
  const int64_t T = dlogits_TX.dim(0), X = dlogits_TX.dim(1), D = x_TD.dim(1);
  check_f32(op, "dlogits", dlogits_TX, {T, X});
  check_activation(op, "x", x_TD, {T, D});
  check_f32(op, "dw", dw_XD, {X, D});
  if (x_TD.dtype() == DType::F32) return linear_backward_weight(ctx, dlogits_TX, x_TD, dw_XD, accumulate);
  // Chunk k of the positions: s [3Xp, D] (+)= d3[t0:t1]^T . x[t0:t1] (row blocks: contiguous).
  const Tensor d3 = split(ctx, dlogits_TX, false);
  const int64_t M = d3.dim(1), Xp = M / 3;
  const int chunks = static_cast<int>(router_gate::chunks(T));
  Tensor s = scratch(ctx, {M, D}, DType::F32);
  const auto* xb = static_cast<const __nv_bfloat16*>(x_TD.data());
  const auto* db = static_cast<const __nv_bfloat16*>(d3.data());
  for (int k = 0; k < chunks; ++k) {
    const int64_t t0 = k * kChunk, tc = std::min(kChunk, T - t0);
    // dw^T (D x M) = (x^T as D x tc) (d3^T as M x tc)^T, as gemm.cu's weight gradient.
    matmul(ctx, op, CUBLAS_OP_N, Operand{xb + t0 * D, CUDA_R_16BF, uint64_t(D), uint64_t(tc), D}, CUBLAS_OP_T,
           Operand{db + t0 * M, CUDA_R_16BF, uint64_t(M), uint64_t(tc), M}, s.data(), CUDA_R_32F, uint64_t(D),
           uint64_t(M), uint64_t(tc), k > 0 ? 1.0f : 0.0f, Vary::kK);
  }
  sum_parts(ctx, s, PartSums{D, Xp * D}, dw_XD, accumulate);
}

}  // namespace quill::cuda
