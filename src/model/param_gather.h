// The whole model's values from the ranks of a layout: each tensor's slices gathered
// from the ranks that hold them (one canonical holder per slice: the first data-parallel replica,
// the first tensor-parallel rank of a replicated tensor, the first expert-data-parallel replica of
// an expert) onto world rank 0, in the whole model's table order and global shapes. The Hugging Face
// export no longer uses it (it holds the whole model in fp32 on one host; io/streamed_hf_export.h writes
// without a gather): it is the reference the streamed export is tested against, and --dump-grads-step's.
#pragma once

#include "model/params.h"
#include "ops/device_context.h"
#include "parallel/layout.h"

namespace quill {

// Collective over the layout's world. World rank 0 receives the whole table (fp32 values on the
// host, checkpoint dtypes and flags kept); the other ranks an empty one. On one rank it is
// host_copy (model/param_placement.h).
ParamTable gather_whole(const ParamTable& table, const DeviceContext& ctx, const Layout& layout,
                        const InklingConfig& config);
// The gradients the same way, before the optimizer step (--dump-grads-step under a layout): each
// bucket's gradient summed over its reduction groups as the optimizer sums it (on a copy), every
// tensor's slices gathered onto world rank 0 as `value` and `grad`, `trainable` as on this rank. Collective over
// the layout's world.
ParamTable gather_whole_grads(const ParamTable& table, const DeviceContext& ctx, const Layout& layout,
                              const InklingConfig& config);

}  // namespace quill
