// The CUDA backend's op table: every op the backend implements, by the public op it serves.
// An op missing here fails with "not implemented on the CUDA backend" when a CUDA context calls it.
#include "ops/op_table.h"

#include "ops/cuda/cuda_context.h"
#include "ops/cuda/kernels.h"

namespace quill {

namespace {
OpTable make_table() {
  OpTable t;
  // Entries are added family by family as kernels land (see kernels.h for the full list).
  return t;
}
}  // namespace

const OpTable& cuda_op_table() {
  static const OpTable table = make_table();
  return table;
}

}  // namespace quill
