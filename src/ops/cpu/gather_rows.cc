// CPU reference of gather_rows (ops/gather_rows.h): a memcpy per row, every index checked.
#include "ops/gather_rows.h"

#include <cstring>

#include "ops/dispatch.h"
#include "ops/op_table.h"

namespace quill::ops {

using ops_detail::require_cpu;
using ops_detail::require_dtype;

void gather_rows(const DeviceContext& ctx, const Tensor& src_RD, const Tensor& index_N, const Tensor& dst_ND) {
  if (ctx.device == Device::CUDA)
    return cuda_op(ctx, &OpTable::gather_rows, "gather_rows")(ctx, src_RD, index_N, dst_ND);
  const char* op = "gather_rows";
  require_cpu(op, ctx);
  QUILL_CHECK(src_RD.defined() && src_RD.ndim() == 2, "{}: src must be 2-D [R, D], got {}", op,
              src_RD.defined() ? src_RD.describe() : std::string("(undefined)"));
  QUILL_CHECK(index_N.defined() && index_N.ndim() == 1, "{}: index must be 1-D [N], got {}", op,
              index_N.defined() ? index_N.describe() : std::string("(undefined)"));
  require_dtype(op, "index", index_N, DType::I32);
  const int64_t R = src_RD.dim(0), N = index_N.dim(0);
  QUILL_CHECK(dst_ND.defined() && dst_ND.shape() == Shape({N, src_RD.dim(1)}) && dst_ND.dtype() == src_RD.dtype(),
              "{}: dst is {}, expected [{}, {}] {}", op, dst_ND.defined() ? dst_ND.describe() : "(undefined)", N,
              src_RD.dim(1), dtype_name(src_RD.dtype()));
  const size_t row_bytes = static_cast<size_t>(src_RD.dim(1)) * dtype_size(src_RD.dtype());
  const int32_t* index = index_N.data_as<int32_t>();
  for (int64_t i = 0; i < N; ++i)
    QUILL_CHECK(index[i] >= 0 && index[i] < R, "{}: index[{}] is {}, outside the {} rows of src", op, i, index[i], R);
  const char* src = static_cast<const char*>(src_RD.data());
  char* dst = static_cast<char*>(dst_ND.data());
  if (row_bytes == 0) return;
  for (int64_t i = 0; i < N; ++i) std::memcpy(dst + i * row_bytes, src + index[i] * row_bytes, row_bytes);
}

}  // namespace quill::ops
