// The positions of a vocabulary shard's token ids grouped by id, on the device (no host round trip):
// what the embedding backward's fixed-order segment sums walk (embedding.cu, issue 24).
#pragma once

#include <cstdint>

#include "ops/device_context.h"
#include "tensor/tensor.h"

namespace quill::cuda {

// keys_T I32 [T]: the local row (id - begin) of each position's id in ascending order, with V (the
// shard's row count) for ids outside the shard, which sort last; pos_T I32 [T]: the positions in the
// same order, ascending within one id (a stable radix sort), so a segment of equal keys lists that
// id's positions in position order. Both are allocated here from ctx's allocator.
void sort_positions_by_id(const DeviceContext& ctx, const Tensor& ids_T, int64_t begin, int64_t V, Tensor& keys_T,
                          Tensor& pos_T);

}  // namespace quill::cuda
