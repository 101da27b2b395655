// CPU reference of ops/columns.h: plain strided copies.
#include "ops/columns.h"
#include "ops/op_table.h"

#include <cstring>

#include "ops/dispatch.h"

namespace quill::ops {

namespace {
void check(const char* op, const DeviceContext& ctx, const Tensor& x_NW, int64_t col, const Tensor& b_Nw) {
  ops_detail::require_cpu(op, ctx);
  QUILL_CHECK(x_NW.ndim() == 2 && b_Nw.ndim() == 2 && x_NW.dim(0) == b_Nw.dim(0) && col >= 0 &&
                  col + b_Nw.dim(1) <= x_NW.dim(1) && x_NW.dtype() == b_Nw.dtype(),
              "{}: columns [{}, {}) of {} do not match {}", op, col, col + (b_Nw.ndim() == 2 ? b_Nw.dim(1) : 0),
              x_NW.describe(), b_Nw.describe());
}
}  // namespace

void get_columns(const DeviceContext& ctx, const Tensor& x_NW, int64_t col, const Tensor& out_Nw) {
  if (ctx.device == Device::CUDA) return cuda_op(ctx, &OpTable::get_columns, "get_columns")(ctx, x_NW, col, out_Nw);
  check("get_columns", ctx, x_NW, col, out_Nw);
  const size_t es = dtype_size(x_NW.dtype());
  const int64_t N = x_NW.dim(0), W = x_NW.dim(1), w = out_Nw.dim(1);
  const char* src = static_cast<const char*>(x_NW.data());
  char* dst = static_cast<char*>(out_Nw.data());
  for (int64_t n = 0; n < N; ++n) std::memcpy(dst + n * w * es, src + (n * W + col) * es, w * es);
}

void set_columns(const DeviceContext& ctx, const Tensor& x_NW, int64_t col, const Tensor& v_Nw) {
  if (ctx.device == Device::CUDA) return cuda_op(ctx, &OpTable::set_columns, "set_columns")(ctx, x_NW, col, v_Nw);
  check("set_columns", ctx, x_NW, col, v_Nw);
  const size_t es = dtype_size(x_NW.dtype());
  const int64_t N = x_NW.dim(0), W = x_NW.dim(1), w = v_Nw.dim(1);
  char* dst = static_cast<char*>(x_NW.data());
  const char* src = static_cast<const char*>(v_Nw.data());
  for (int64_t n = 0; n < N; ++n) std::memcpy(dst + (n * W + col) * es, src + n * w * es, w * es);
}

}  // namespace quill::ops
