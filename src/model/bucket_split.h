// How the trainable parameters of one kind (one reduction group, compute dtype, tensor-parallel
// role: model/params.h) are cut into buckets, Megatron's rule (megatron/core/distributed's grad
// buffer) at layer granularity: walking the layers from the last to the first, as the backward
// meets them, a bucket takes whole layers until it holds at least `bucket_elements` elements, then
// the next begins. So the first bucket is complete as soon as the backward has passed its layers,
// and its reduction can run under the rest of the backward (docs/decisions/overlap-grad-param.md).
//
// Megatron closes a bucket at any parameter; quill at a layer's end, so that "the backward of layer
// l is done" is the one event that makes buckets ready (a layer's tensors are written by its backward
// only). The split depends on the bucket size alone, never on whether the overlap is on: the flags
// change when a bucket's collective is issued, not which elements it carries or how they shard, which
// is what makes a run with them bit-identical to one without.
#pragma once

#include <cstdint>
#include <vector>

#include "model/params.h"

namespace quill {

// Megatron's default --ddp-bucket-size: max(40,000,000, 1,000,000 x data-parallel size) elements.
int64_t default_bucket_elements(int data_parallel_size);

// `members` (indices into `params`, in table order, all of one kind) cut into buckets of whole
// layers: the buckets in backward order (highest layers first), the members of each in table order.
// bucket_elements <= 0: one bucket of them all (no split).
std::vector<std::vector<size_t>> split_bucket_by_layers(const std::vector<Param>& params,
                                                        const std::vector<size_t>& members, int64_t bucket_elements);

}  // namespace quill
