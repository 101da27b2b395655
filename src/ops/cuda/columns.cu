// Column gather/scatter on the GPU (ops/columns.h): strided 2-D copies.
//
// Math: get_columns: out[n, j] = x[n, col + j];  set_columns: x[n, col + j] = v[n, j];  j in [0, w).
// Shapes: x_NW [N, W]; out_Nw, v_Nw [N, w] with 0 <= col and col + w <= W.
// Dtypes: any, the same for both tensors (bytes are copied).
// Preconditions: contiguous tensors on the context's device, not overlapping. Asynchronous on the context's
// stream: one copy kernel whose unit is the widest of 16, 8, 4, 2 or 1 bytes that both sides' rows, pitches and
// offsets allow. Why a kernel: the copy engine's 2-D copies of narrow rows ran at 450-1,380 GB/s for the stacked
// attention projections' 128-1,024-column blocks of 8,192 rows (H100,
// bench/results/2026-12-07-h100-seed-paths-fp8-convergence), where a full-width copy runs at ~2,700; and at ~7 GB/s
// (9 us a call) for the MoE's one-column fp32 blocks of the routing weights (bench/results/2026-12-07-h100-fp8-kernel-race).
#include "ops/cuda/cuda_resources.h"
#include "ops/cuda/kernels.h"

#include <algorithm>
#include <cstdint>
#include <string>

namespace quill::cuda {
namespace {

// dst[n, :] = src[n, :] for n < rows, each row `units` units of sizeof(Unit) bytes, the rows `dst_pitch` /
// `src_pitch` units apart.
template <typename Unit>
__global__ void copy_rows_kernel(Unit* dst, int64_t dst_pitch, const Unit* src, int64_t src_pitch, int64_t rows,
                                 int64_t units) {
  const int64_t total = rows * units;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = i / units, u = i - n * units;
    dst[n * dst_pitch + u] = src[n * src_pitch + u];
  }
}

template <typename Unit>
void launch_copy_rows(const DeviceContext& ctx, void* dst, size_t dst_pitch, const void* src, size_t src_pitch,
                      size_t row_bytes, size_t rows) {
  constexpr size_t k = sizeof(Unit);
  const int64_t units = static_cast<int64_t>(row_bytes / k), total = units * static_cast<int64_t>(rows);
  if (total == 0) return;
  constexpr int kThreads = 256;
  const int64_t blocks = std::min<int64_t>((total + kThreads - 1) / kThreads, 65535LL * 8);
  copy_rows_kernel<Unit><<<static_cast<unsigned>(blocks), kThreads, 0, stream_of(ctx)>>>(
      static_cast<Unit*>(dst), static_cast<int64_t>(dst_pitch / k), static_cast<const Unit*>(src),
      static_cast<int64_t>(src_pitch / k), static_cast<int64_t>(rows), units);
  QUILL_CUDA_CHECK_LAUNCH("copy_rows_kernel");
}

// The strided copy of both ops: `rows` rows of `row_bytes`, `dst_pitch` / `src_pitch` bytes apart.
void copy_rows(const DeviceContext& ctx, void* dst, size_t dst_pitch, const void* src, size_t src_pitch,
               size_t row_bytes, size_t rows) {
  const uintptr_t all = reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src) | dst_pitch | src_pitch |
                        row_bytes;
  if (all % 16 == 0) return launch_copy_rows<int4>(ctx, dst, dst_pitch, src, src_pitch, row_bytes, rows);
  if (all % 8 == 0) return launch_copy_rows<uint2>(ctx, dst, dst_pitch, src, src_pitch, row_bytes, rows);
  if (all % 4 == 0) return launch_copy_rows<uint32_t>(ctx, dst, dst_pitch, src, src_pitch, row_bytes, rows);
  if (all % 2 == 0) return launch_copy_rows<uint16_t>(ctx, dst, dst_pitch, src, src_pitch, row_bytes, rows);
  launch_copy_rows<uint8_t>(ctx, dst, dst_pitch, src, src_pitch, row_bytes, rows);
}

void check(const char* op, const Tensor& x_NW, int64_t col, const char* b_name, const Tensor& b_Nw) {
  QUILL_CHECK(x_NW.defined() && b_Nw.defined() && x_NW.ndim() == 2 && b_Nw.ndim() == 2 &&
                  x_NW.dim(0) == b_Nw.dim(0) && col >= 0 && col + b_Nw.dim(1) <= x_NW.dim(1) &&
                  x_NW.dtype() == b_Nw.dtype(),
              "{}: columns [{}, {}) of x {} do not match {} {}", op, col,
              col + (b_Nw.defined() && b_Nw.ndim() == 2 ? b_Nw.dim(1) : 0),
              x_NW.defined() ? x_NW.describe() : std::string("(undefined)"), b_name,
              b_Nw.defined() ? b_Nw.describe() : std::string("(undefined)"));
  QUILL_CHECK(x_NW.device() == Device::CUDA, "{}: x must be a CUDA tensor, got {}", op, x_NW.describe());
  QUILL_CHECK(b_Nw.device() == Device::CUDA, "{}: {} must be a CUDA tensor, got {}", op, b_name, b_Nw.describe());
}

}  // namespace

void get_columns(const DeviceContext& ctx, const Tensor& x_NW, int64_t col, const Tensor& out_Nw) {
  check("get_columns", x_NW, col, "out", out_Nw);
  const size_t es = dtype_size(x_NW.dtype());
  const size_t N = x_NW.dim(0), W = x_NW.dim(1), w = out_Nw.dim(1);
  if (N == 0 || w == 0) return;
  copy_rows(ctx, out_Nw.data(), w * es, static_cast<const char*>(x_NW.data()) + col * es, W * es, w * es, N);
}

void set_columns(const DeviceContext& ctx, const Tensor& x_NW, int64_t col, const Tensor& v_Nw) {
  check("set_columns", x_NW, col, "v", v_Nw);
  const size_t es = dtype_size(x_NW.dtype());
  const size_t N = x_NW.dim(0), W = x_NW.dim(1), w = v_Nw.dim(1);
  if (N == 0 || w == 0) return;
  copy_rows(ctx, static_cast<char*>(x_NW.data()) + col * es, W * es, v_Nw.data(), w * es, w * es, N);
}

}  // namespace quill::cuda
