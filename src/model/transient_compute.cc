#include "model/transient_compute.h"

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
    for (size_t i : b.members) {
      Param& p = table.params()[i];
      p.compute = b.compute.view_flat(p.bucket_offset, p.shape);
    }
    // All of it zeroed, not only the padding (which goes through the all-gather and stays zero, as placement
    // leaves it): the update writes this rank's shard and the all-gather the peers' blocks, except under
    // --simulate-rank, whose loopback gather leaves the peers' blocks as they are (docs/simulate-rank.md). In a
    // fresh buffer that is whatever the allocator's memory held, and the FP8 copies made from it were NaN at the
    // second step (the seed's stages on an H200, 2026-12-06). Zeros compute as zeros there (the simulated loss
    // means nothing; the timings do not depend on the values); in a real run the gather overwrites them. The copy
    // stream's writes of the offloaded shard are ordered after this (ops::transfer_async).
    ops::zero(ctx, b.compute);
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
