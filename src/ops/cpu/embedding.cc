// CPU reference of the embedding lookup.
//   forward:  out[t, :] = table[ids[t], :]
//   backward: dtable[ids[t], :] += dout[t, :]   (accumulated; repeated ids add up)
// Legend: V vocabulary rows, D model width, T tokens. table_VD, out_TD, dout_TD, dtable_VD share one
// float dtype (F32 or F64); ids_T is I32. An id outside [0, V) is an error naming the position.
#include "ops/embedding.h"
#include "ops/op_table.h"

#include <cstring>

#include "ops/dispatch.h"

namespace quill::ops {
namespace {

using ops_detail::dispatch_float;
using ops_detail::require_cpu;
using ops_detail::require_dtype;
using ops_detail::require_shape;

void check_ids(const char* op, const Tensor& ids_T, int64_t V) {
  QUILL_CHECK(ids_T.defined() && ids_T.ndim() == 1, "{}: ids must be 1-D [T], got {}", op, ids_T.describe());
  require_dtype(op, "ids", ids_T, DType::I32);
  const int32_t* ids = ids_T.data_as<int32_t>();
  for (int64_t t = 0; t < ids_T.dim(0); ++t)
    QUILL_CHECK(ids[t] >= 0 && ids[t] < V, "{}: token id {} at position {} is outside the vocabulary [0, {})", op,
                ids[t], t, V);
}

// Rows [begin, begin + table rows) of the vocabulary are this table's; other ids read as zeros
// (forward) and are skipped (backward).
template <typename T>
void forward_impl(const Tensor& table_VD, const Tensor& ids_T, int64_t begin, const Tensor& out_TD) {
  const int64_t n_tok = ids_T.dim(0), V = table_VD.dim(0), D = table_VD.dim(1);
  const T* table = table_VD.data_as<T>();
  const int32_t* ids = ids_T.data_as<int32_t>();
  T* out = out_TD.data_as<T>();
  for (int64_t t = 0; t < n_tok; ++t) {
    const int64_t row = ids[t] - begin;
    if (row >= 0 && row < V) std::memcpy(out + t * D, table + row * D, sizeof(T) * D);
    else std::memset(out + t * D, 0, sizeof(T) * D);
  }
}

template <typename T>
void backward_impl(const Tensor& ids_T, const Tensor& dout_TD, int64_t begin, const Tensor& dtable_VD) {
  const int64_t n_tok = ids_T.dim(0), V = dtable_VD.dim(0), D = dtable_VD.dim(1);
  const int32_t* ids = ids_T.data_as<int32_t>();
  const T* dout = dout_TD.data_as<T>();
  T* dtable = dtable_VD.data_as<T>();
  for (int64_t t = 0; t < n_tok; ++t) {
    const int64_t r = ids[t] - begin;
    if (r < 0 || r >= V) continue;
    T* row = dtable + r * D;
    const T* g = dout + t * D;
    for (int64_t d = 0; d < D; ++d) row[d] += g[d];
  }
}

}  // namespace

void embedding_forward_shard(const DeviceContext& ctx, const Tensor& table_VD, const Tensor& ids_T, int64_t vocab_begin,
                             int64_t vocab_total, const Tensor& out_TD) {
  if (ctx.device == Device::CUDA)
    return cuda_op(ctx, &OpTable::embedding_forward_shard, "embedding_forward_shard")(ctx, table_VD, ids_T, vocab_begin,
                                                                                      vocab_total, out_TD);
  const char* op = "embedding_forward";
  QUILL_CHECK(table_VD.defined() && table_VD.ndim() == 2, "{}: table must be 2-D [V, D], got {}", op,
              table_VD.describe());
  const int64_t V = table_VD.dim(0), D = table_VD.dim(1);
  QUILL_CHECK(vocab_begin >= 0 && vocab_begin + V <= vocab_total, "{}: rows [{}, {}) are not inside a vocabulary of {}",
              op, vocab_begin, vocab_begin + V, vocab_total);
  QUILL_CHECK(ids_T.defined() && ids_T.ndim() == 1, "{}: ids must be 1-D [T], got {}", op, ids_T.describe());
  require_shape(op, "out", out_TD, {ids_T.dim(0), D});
  require_dtype(op, "out", out_TD, table_VD.dtype());
  require_cpu(op, ctx);
  check_ids(op, ids_T, vocab_total);
  dispatch_float(op, table_VD, [&]<typename T>() { forward_impl<T>(table_VD, ids_T, vocab_begin, out_TD); });
}

void embedding_backward_shard(const DeviceContext& ctx, const Tensor& ids_T, const Tensor& dout_TD,
                              int64_t vocab_begin, int64_t vocab_total, const Tensor& dtable_VD) {
  if (ctx.device == Device::CUDA)
    return cuda_op(ctx, &OpTable::embedding_backward_shard, "embedding_backward_shard")(ctx, ids_T, dout_TD,
                                                                                        vocab_begin, vocab_total,
                                                                                        dtable_VD);
  const char* op = "embedding_backward";
  QUILL_CHECK(dtable_VD.defined() && dtable_VD.ndim() == 2, "{}: dtable must be 2-D [V, D], got {}", op,
              dtable_VD.describe());
  const int64_t V = dtable_VD.dim(0), D = dtable_VD.dim(1);
  QUILL_CHECK(vocab_begin >= 0 && vocab_begin + V <= vocab_total, "{}: rows [{}, {}) are not inside a vocabulary of {}",
              op, vocab_begin, vocab_begin + V, vocab_total);
  QUILL_CHECK(ids_T.defined() && ids_T.ndim() == 1, "{}: ids must be 1-D [T], got {}", op, ids_T.describe());
  require_shape(op, "dout", dout_TD, {ids_T.dim(0), D});
  require_dtype(op, "dout", dout_TD, dtable_VD.dtype());
  require_cpu(op, ctx);
  check_ids(op, ids_T, vocab_total);
  dispatch_float(op, dtable_VD, [&]<typename T>() { backward_impl<T>(ids_T, dout_TD, vocab_begin, dtable_VD); });
}

void embedding_forward(const DeviceContext& ctx, const Tensor& table_VD, const Tensor& ids_T, const Tensor& out_TD) {
  if (ctx.device == Device::CUDA) return cuda_op(ctx, &OpTable::embedding_forward, "embedding_forward")(ctx, table_VD, ids_T, out_TD);
  QUILL_CHECK(table_VD.defined() && table_VD.ndim() == 2, "embedding_forward: table must be 2-D [V, D], got {}",
              table_VD.describe());
  embedding_forward_shard(ctx, table_VD, ids_T, 0, table_VD.dim(0), out_TD);
}

void embedding_backward(const DeviceContext& ctx, const Tensor& ids_T, const Tensor& dout_TD, const Tensor& dtable_VD) {
  if (ctx.device == Device::CUDA) return cuda_op(ctx, &OpTable::embedding_backward, "embedding_backward")(ctx, ids_T, dout_TD, dtable_VD);
  QUILL_CHECK(dtable_VD.defined() && dtable_VD.ndim() == 2, "embedding_backward: dtable must be 2-D [V, D], got {}",
              dtable_VD.describe());
  embedding_backward_shard(ctx, ids_T, dout_TD, 0, dtable_VD.dim(0), dtable_VD);
}

}  // namespace quill::ops
