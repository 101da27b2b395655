// Column gather/scatter on the GPU (ops/columns.h): strided 2-D copies.
//
// Math: get_columns: out[n, j] = x[n, col + j];  set_columns: x[n, col + j] = v[n, j];  j in [0, w).
// Shapes: x_NW [N, W]; out_Nw, v_Nw [N, w] with 0 <= col and col + w <= W.
// Dtypes: any, the same for both tensors (bytes are copied).
// Preconditions: contiguous tensors on the context's device, not overlapping. Asynchronous on the context's
// stream: a copy kernel of 16-byte units where both sides' rows, pitches and offsets are 16-byte aligned, else
// one cudaMemcpy2DAsync. Why the kernel: the copy engine's 2-D copies of narrow rows ran at 450-1,380 GB/s for
// the stacked attention projections' 128-1,024-column blocks of 8,192 rows (H100,
// bench/results/2026-12-07-h100-seed-paths-fp8-convergence), where a full-width copy runs at ~2,700.
#include "ops/cuda/cuda_resources.h"
#include "ops/cuda/kernels.h"

#include <algorithm>
#include <cstdint>
#include <string>

namespace quill::cuda {
namespace {

// dst[n, :] = src[n, :] for n < rows, each row `units` 16-byte units, the rows `dst_pitch` / `src_pitch` units
// apart.
__global__ void copy_rows_16b_kernel(int4* dst, int64_t dst_pitch, const int4* src, int64_t src_pitch, int64_t rows,
                                     int64_t units) {
  const int64_t total = rows * units;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = i / units, u = i - n * units;
    dst[n * dst_pitch + u] = src[n * src_pitch + u];
  }
}

// The strided copy of both ops: `rows` rows of `row_bytes`, `dst_pitch` / `src_pitch` bytes apart.
void copy_rows(const DeviceContext& ctx, void* dst, size_t dst_pitch, const void* src, size_t src_pitch,
               size_t row_bytes, size_t rows) {
  constexpr size_t k16 = 16;
  const bool aligned = reinterpret_cast<uintptr_t>(dst) % k16 == 0 && reinterpret_cast<uintptr_t>(src) % k16 == 0 &&
                       dst_pitch % k16 == 0 && src_pitch % k16 == 0 && row_bytes % k16 == 0;
  if (!aligned) {
    QUILL_CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, row_bytes, rows, cudaMemcpyDeviceToDevice,
                                       stream_of(ctx)));
    return;
  }
  const int64_t units = static_cast<int64_t>(row_bytes / k16), total = units * static_cast<int64_t>(rows);
  constexpr int kThreads = 256;
  const int64_t blocks = std::min<int64_t>((total + kThreads - 1) / kThreads, 65535LL * 8);
  copy_rows_16b_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream_of(ctx)>>>(
      static_cast<int4*>(dst), static_cast<int64_t>(dst_pitch / k16), static_cast<const int4*>(src),
      static_cast<int64_t>(src_pitch / k16), static_cast<int64_t>(rows), units);
  QUILL_CUDA_CHECK_LAUNCH("copy_rows_16b_kernel");
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
