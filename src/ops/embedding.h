// Embedding lookup. Shapes: table_VD [V, D], ids_T I32 [T], out_TD [T, D].
// Backward accumulates into dtable (dtable[ids[t]] += dout[t]). An id outside [0, V) is an error
// naming the position.
#pragma once

#include "ops/device_context.h"

namespace quill::ops {

void embedding_forward(const DeviceContext& ctx, const Tensor& table_VD, const Tensor& ids_T, const Tensor& out_TD);
void embedding_backward(const DeviceContext& ctx, const Tensor& ids_T, const Tensor& dout_TD, const Tensor& dtable_VD);

// Vocab-parallel (Megatron's VocabParallelEmbedding): table_VD holds rows [vocab_begin, vocab_begin
// + V) of a vocabulary of vocab_total rows. Forward writes a zero row for an id outside that range
// (another rank's), backward skips it; an id outside [0, vocab_total) is an error naming the position.
void embedding_forward_shard(const DeviceContext& ctx, const Tensor& table_VD, const Tensor& ids_T, int64_t vocab_begin,
                             int64_t vocab_total, const Tensor& out_TD);
void embedding_backward_shard(const DeviceContext& ctx, const Tensor& ids_T, const Tensor& dout_TD,
                              int64_t vocab_begin, int64_t vocab_total, const Tensor& dtable_VD);

}  // namespace quill::ops
