// The router's gate GEMMs on the GPU (ops/router.h: router_gate_*), in fp32 arithmetic either way
// --router-gemm says (ops/router_gemm.h, docs/decisions/router-gemm-bf16x3.md):
//
//   fp32    x widened to fp32 when it is bf16, then cuBLASLt's fp32 GEMMs (gemm.cu), as the CPU reference.
//   bf16x3  each fp32 operand split into three bf16 parts that sum to it exactly (bf16x3.h); one bf16
//           cuBLASLt GEMM over all the part pairs at once, fp32 accumulation:
//     forward          y3 [T, 3Xp] = x [T, D] . Ws^T, Ws [3Xp, D] the gate's parts stacked by rows (hi, mid,
//                      lo, each padded to Xp rows with zeros); logits[t, i] = (lo + mid) + hi of y3's blocks.
//                      x is bf16 already: its products with the parts are exact.
//     backward weight  S [3Xp, D] = Ds^T . x, Ds [T, 3Xp] dlogits' parts side by side; dw (+)= (lo + mid) + hi.
//     backward input   dx [T, D] = D6 [T, 6Xp] . W6 [6Xp, D]: the six part pairs of bf16x3::kLeftPart and
//                      kRightPart laid side by side along the contraction, so one GEMM sums them all.
//
// Shapes: x_TD [T, D] BF16 or F32, w_XD F32 [X, D], logits_TX / dlogits_TX F32 [T, X], dx_TD [T, D] BF16 or
// F32 (overwritten, rounded once from fp32), dw_XD F32 [X, D] (added to when accumulate, else overwritten).
// Xp = X rounded up to 8 (16-byte rows for cuBLASLt). Workspace (transient, from the context's allocator): at a
// seed rank (T 2,048, D 4,096, X 258) 13 MB forward, 16 MB backward weight, 20 MB backward input, below the fp32
// path's widened x (32 MB).
#include <algorithm>
#include <cstdint>

#include "ops/cuda/bf16x3.h"
#include "ops/cuda/cuda_resources.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/tensor_checks.h"
#include "ops/dispatch.h"

namespace quill::cuda {
namespace {

using ops_detail::require_dtype;
using ops_detail::require_shape;

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 8192;

int blocks_for(int64_t items) {
  return static_cast<int>(std::clamp<int64_t>((items + kThreads - 1) / kThreads, 1, kMaxBlocks));
}

// Which part each block of a split operand holds, block b at rows (or columns) [b * padded, b * padded + n).
struct PartBlocks {
  int count = 0;
  int part[bf16x3::kPairs] = {};
};

PartBlocks one_sided() { return {3, {0, 1, 2}}; }
PartBlocks pairs_left() {
  PartBlocks b{bf16x3::kPairs, {}};
  for (int i = 0; i < bf16x3::kPairs; ++i) b.part[i] = bf16x3::kLeftPart[i];
  return b;
}
PartBlocks pairs_right() {
  PartBlocks b{bf16x3::kPairs, {}};
  for (int i = 0; i < bf16x3::kPairs; ++i) b.part[i] = bf16x3::kRightPart[i];
  return b;
}

// src [R, C] fp32 -> dst bf16 bits, the blocks stacked by rows ([count * Rp, C]) or side by side by columns
// ([R, count * Cp]); padding rows or columns are zero.
__global__ void split_kernel(const float* src, int64_t R, int64_t C, uint16_t* dst, int64_t dst_rows,
                             int64_t dst_cols, int64_t padded, bool by_rows, PartBlocks blocks) {
  const int64_t n = dst_rows * dst_cols;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t row = i / dst_cols, col = i % dst_cols;
    const int64_t b = (by_rows ? row : col) / padded;
    const int64_t r = by_rows ? row - b * padded : row, c = by_rows ? col : col - b * padded;
    dst[i] = (r < R && c < C) ? bf16x3::part_bits(src[r * C + c], blocks.part[b]) : uint16_t{0};
  }
}

// out [R, C] (+)= (lo + mid) + hi, the three fp32 blocks of src stacked by rows ([3Rp, C]) or by columns
// ([R, 3Cp]).
__global__ void sum_parts_kernel(const float* src, int64_t R, int64_t C, int64_t padded, bool by_rows, float* out,
                                 bool accumulate) {
  const int64_t n = R * C;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t r = i / C, c = i % C;
    const int64_t block = by_rows ? padded * C : padded;  // the distance between one part's element and the next's
    const float* s = src + (by_rows ? r * C + c : r * 3 * padded + c);
    const float sum = (s[2 * block] + s[block]) + s[0];
    out[i] = accumulate ? out[i] + sum : sum;
  }
}

int64_t padded8(int64_t n) { return (n + 7) / 8 * 8; }

Tensor scratch(const DeviceContext& ctx, Shape shape, DType dtype) {
  return Tensor::empty(std::move(shape), dtype, *ctx.allocator);
}

// The split of an fp32 [R, C] matrix into `blocks` (bf16, by rows or by columns, padded to 8).
Tensor split(const DeviceContext& ctx, const Tensor& src, bool by_rows, const PartBlocks& blocks) {
  const int64_t R = src.dim(0), C = src.dim(1);
  const int64_t padded = padded8(by_rows ? R : C);
  const int64_t rows = by_rows ? blocks.count * padded : R, cols = by_rows ? C : blocks.count * padded;
  Tensor dst = scratch(ctx, {rows, cols}, DType::BF16);
  split_kernel<<<blocks_for(rows * cols), kThreads, 0, stream_of(ctx)>>>(
      src.data_as<float>(), R, C, static_cast<uint16_t*>(dst.data()), rows, cols, padded, by_rows, blocks);
  QUILL_CUDA_CHECK_LAUNCH("split_kernel");
  return dst;
}

void sum_parts(const DeviceContext& ctx, const Tensor& src, bool by_rows, const Tensor& out, bool accumulate) {
  const int64_t R = out.dim(0), C = out.dim(1);
  sum_parts_kernel<<<blocks_for(R * C), kThreads, 0, stream_of(ctx)>>>(
      src.data_as<float>(), R, C, padded8(by_rows ? R : C), by_rows, static_cast<float*>(out.data()), accumulate);
  QUILL_CUDA_CHECK_LAUNCH("sum_parts_kernel");
}

Tensor widened(const DeviceContext& ctx, const Tensor& x) {
  if (x.dtype() == DType::F32) return x;
  Tensor x32 = scratch(ctx, x.shape(), DType::F32);
  convert(ctx, x, x32);
  return x32;
}

bool by_parts(const DeviceContext& ctx) { return ctx.cuda->router_gemm == RouterGemm::kBf16x3; }

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
  if (!by_parts(ctx) || x_TD.dtype() == DType::F32) return linear_forward(ctx, widened(ctx, x_TD), w_XD, logits_TX);
  const Tensor ws = split(ctx, w_XD, true, one_sided());
  Tensor y3 = scratch(ctx, {T, ws.dim(0)}, DType::F32);
  linear_forward(ctx, x_TD, ws, y3);
  sum_parts(ctx, y3, false, logits_TX, false);
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
  if (!by_parts(ctx)) {
    if (dx_TD.dtype() == DType::F32) return linear_backward_input(ctx, dlogits_TX, w_XD, dx_TD, false);
    Tensor dx32 = scratch(ctx, {T, D}, DType::F32);
    linear_backward_input(ctx, dlogits_TX, w_XD, dx32, false);
    return convert(ctx, dx32, dx_TD);
  }
  const Tensor d6 = split(ctx, dlogits_TX, false, pairs_left());
  const Tensor w6 = split(ctx, w_XD, true, pairs_right());
  linear_backward_input(ctx, d6, w6, dx_TD, false);
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
  if (!by_parts(ctx) || x_TD.dtype() == DType::F32)
    return linear_backward_weight(ctx, dlogits_TX, widened(ctx, x_TD), dw_XD, accumulate);
  const Tensor d3 = split(ctx, dlogits_TX, false, one_sided());
  Tensor s = scratch(ctx, {d3.dim(1), D}, DType::F32);
  linear_backward_weight(ctx, d3, x_TD, s, false);
  sum_parts(ctx, s, true, dw_XD, accumulate);
}

}  // namespace quill::cuda
