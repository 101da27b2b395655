#include "model/transient_compute.h"

#include <algorithm>

#include "model/fp8_params.h"
#include "model/param_placement.h"
#include "ops/convert.h"

namespace quill {

bool has_transient_compute(const Param& p, Device device) {
  return p.fp8 && device == Device::CUDA && computes_in_bf16(p);
}

void hold_transient_compute(ParamTable& table, const DeviceContext& ctx) {
  for (ParamBucket& b : table.buckets()) {
    if (!b.compute_transient || b.compute.defined()) continue;
    b.compute = Tensor::empty({b.numel}, b.compute_dtype, *ctx.allocator);
    int64_t end = 0;
    for (size_t i : b.members) {
      Param& p = table.params()[i];
      p.compute = b.compute.view_flat(p.bucket_offset, p.shape);
      end = std::max(end, p.bucket_offset + shape_numel(p.shape));
    }
    // The padding goes through the all-gather like the rest; zero, as placement leaves it.
    if (end < b.numel) ops::zero(ctx, b.compute.view_flat(end, {b.numel - end}));
  }
}

void release_transient_compute(ParamTable& table, ParamBucket& b, const DeviceContext& ctx) {
  if (!b.compute_transient || !b.compute.defined()) return;
  for (size_t i : b.members) {
    Param& p = table.params()[i];
    fp8_weight(ctx, p);
    p.compute = Tensor();
  }
  b.compute = Tensor();
}

void release_transient_compute(ParamTable& table, const DeviceContext& ctx) {
  for (ParamBucket& b : table.buckets()) release_transient_compute(table, b, ctx);
  for (Param& p : table.params()) {
    if (p.trainable || !p.compute.defined() || !has_transient_compute(p, ctx.device)) continue;
    fp8_weight(ctx, p);
    p.compute = Tensor();
  }
}

}  // namespace quill
