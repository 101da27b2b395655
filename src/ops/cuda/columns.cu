// Column gather/scatter on the GPU (ops/columns.h): strided 2-D copies.
//
// Math: get_columns: out[n, j] = x[n, col + j];  set_columns: x[n, col + j] = v[n, j];  j in [0, w).
// Shapes: x_NW [N, W]; out_Nw, v_Nw [N, w] with 0 <= col and col + w <= W.
// Dtypes: any, the same for both tensors (bytes are copied).
// Preconditions: contiguous tensors on the context's device, not overlapping. One
// cudaMemcpy2DAsync on the context's stream (asynchronous).
#include "ops/cuda/cuda_resources.h"
#include "ops/cuda/kernels.h"

#include <string>

namespace quill::cuda {
namespace {

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
  QUILL_CUDA_CHECK(cudaMemcpy2DAsync(out_Nw.data(), w * es, static_cast<const char*>(x_NW.data()) + col * es, W * es,
                                     w * es, N, cudaMemcpyDeviceToDevice, stream_of(ctx)));
}

void set_columns(const DeviceContext& ctx, const Tensor& x_NW, int64_t col, const Tensor& v_Nw) {
  check("set_columns", x_NW, col, "v", v_Nw);
  const size_t es = dtype_size(x_NW.dtype());
  const size_t N = x_NW.dim(0), W = x_NW.dim(1), w = v_Nw.dim(1);
  if (N == 0 || w == 0) return;
  QUILL_CUDA_CHECK(cudaMemcpy2DAsync(static_cast<char*>(x_NW.data()) + col * es, W * es, v_Nw.data(), w * es,
                                     w * es, N, cudaMemcpyDeviceToDevice, stream_of(ctx)));
}

}  // namespace quill::cuda
