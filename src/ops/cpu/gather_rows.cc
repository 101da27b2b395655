// CPU reference of gather_rows and gather_rows_from_pair (ops/gather_rows.h): a memcpy per row, every index
// checked; and the two-source expert merge (expert_merge_index, merge_expert_rows) on any device.
#include "ops/gather_rows.h"

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "ops/convert.h"
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

void regroup_index(const DeviceContext& ctx, const Tensor& counts_SL, const Tensor& index_2R) {
  if (ctx.device == Device::CUDA)
    return cuda_op(ctx, &OpTable::regroup_index, "regroup_index")(ctx, counts_SL, index_2R);
  const char* op = "regroup_index";
  require_cpu(op, ctx);
  QUILL_CHECK(counts_SL.defined() && counts_SL.ndim() == 2, "{}: counts must be 2-D [S, L], got {}", op,
              counts_SL.defined() ? counts_SL.describe() : std::string("(undefined)"));
  require_dtype(op, "counts", counts_SL, DType::I64);
  QUILL_CHECK(index_2R.defined() && index_2R.ndim() == 1, "{}: index must be 1-D [2R], got {}", op,
              index_2R.defined() ? index_2R.describe() : std::string("(undefined)"));
  require_dtype(op, "index", index_2R, DType::I32);
  const int64_t S = counts_SL.dim(0), L = counts_SL.dim(1);
  const int64_t* n = counts_SL.data_as<int64_t>();
  int64_t R = 0;
  for (int64_t i = 0; i < S * L; ++i) {
    QUILL_CHECK(n[i] >= 0, "{}: counts[{}, {}] is {}, expected >= 0", op, i / L, i % L, n[i]);
    R += n[i];
  }
  QUILL_CHECK(index_2R.dim(0) == 2 * R, "{}: index has {} entries, expected 2 x {} (the counts' sum)", op,
              index_2R.dim(0), R);
  QUILL_CHECK(R < (int64_t{1} << 31), "{}: {} rows exceed the I32 row index", op, R);
  std::vector<int64_t> by_source(static_cast<size_t>(S * L));
  int64_t at = 0;
  for (int64_t i = 0; i < S * L; ++i) by_source[static_cast<size_t>(i)] = at, at += n[i];
  int32_t* to_expert = index_2R.data_as<int32_t>();
  int32_t* to_source = to_expert + R;
  at = 0;
  for (int64_t e = 0; e < L; ++e)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t r = 0; r < n[s * L + e]; ++r, ++at) {
        const int64_t from = by_source[static_cast<size_t>(s * L + e)] + r;
        to_expert[at] = static_cast<int32_t>(from);
        to_source[from] = static_cast<int32_t>(at);
      }
}

Tensor expert_merge_index(const Tensor& counts_a_E, const Tensor& counts_b_E) {
  const char* op = "expert_merge_index";
  for (const auto& [name, t] : {std::pair{"counts_a", &counts_a_E}, std::pair{"counts_b", &counts_b_E}})
    QUILL_CHECK(t->defined() && t->ndim() == 1 && t->dtype() == DType::I64 && t->device() == Device::CPU,
                "{}: {} must be host I64 [E], got {}", op, name, t->defined() ? t->describe() : std::string("(undefined)"));
  const int64_t E = counts_a_E.dim(0);
  QUILL_CHECK(counts_b_E.dim(0) == E, "{}: {} experts in a, {} in b", op, E, counts_b_E.dim(0));
  const int64_t* a = counts_a_E.data_as<int64_t>();
  const int64_t* b = counts_b_E.data_as<int64_t>();
  int64_t Pa = 0, N = 0;
  for (int64_t e = 0; e < E; ++e) {
    QUILL_CHECK(a[e] >= 0 && b[e] >= 0, "{}: expert {} has {} and {} rows", op, e, a[e], b[e]);
    Pa += a[e], N += a[e] + b[e];
  }
  QUILL_CHECK(N < (int64_t{1} << 31), "{}: {} rows exceed the I32 row index", op, N);
  Tensor index = Tensor::empty({N}, DType::I32);
  int32_t* at = index.data_as<int32_t>();
  int64_t from_a = 0, from_b = Pa;
  for (int64_t e = 0; e < E; ++e) {
    for (int64_t r = 0; r < a[e]; ++r) *at++ = static_cast<int32_t>(from_a++);
    for (int64_t r = 0; r < b[e]; ++r) *at++ = static_cast<int32_t>(from_b++);
  }
  return index;
}

MergedExpertRows merge_expert_rows(const DeviceContext& ctx, const Tensor& dy_a, const Tensor& x_a,
                                   const Tensor& counts_a_E, const Tensor& dy_b, const Tensor& x_b,
                                   const Tensor& counts_b_E) {
  const char* op = "merge_expert_rows";
  for (const auto& [name, t] : {std::pair{"dy_a", &dy_a}, std::pair{"x_a", &x_a}, std::pair{"dy_b", &dy_b},
                                std::pair{"x_b", &x_b}})
    QUILL_CHECK(t->defined() && t->ndim() == 2, "{}: {} must be 2-D, got {}", op, name,
                t->defined() ? t->describe() : std::string("(undefined)"));
  const Tensor host_index = expert_merge_index(counts_a_E, counts_b_E);
  const int64_t N = host_index.dim(0), E = counts_a_E.dim(0);
  QUILL_CHECK(N == dy_a.dim(0) + dy_b.dim(0), "{}: the counts sum to {} rows, dy_a and dy_b hold {} + {}", op, N,
              dy_a.dim(0), dy_b.dim(0));
  Tensor index = host_index;
  if (ctx.device != Device::CPU) {
    index = Tensor::empty({N}, DType::I32, *ctx.allocator);
    transfer(ctx, host_index, index);
  }
  auto merged = [&](const Tensor& a, const Tensor& b) {
    Tensor out = Tensor::empty({N, a.dim(1)}, a.dtype(), *ctx.allocator);
    gather_rows_from_pair(ctx, a, b, index, out);
    return out;
  };
  MergedExpertRows m;
  m.dy = merged(dy_a, dy_b);
  m.x = merged(x_a, x_b);
  m.counts = Tensor::empty({E}, DType::I64);
  for (int64_t e = 0; e < E; ++e)
    m.counts.data_as<int64_t>()[e] = counts_a_E.data_as<int64_t>()[e] + counts_b_E.data_as<int64_t>()[e];
  return m;
}

void gather_rows_from_pair(const DeviceContext& ctx, const Tensor& a_RD, const Tensor& b_SD, const Tensor& index_N,
                           const Tensor& dst_ND) {
  if (ctx.device == Device::CUDA)
    return cuda_op(ctx, &OpTable::gather_rows_from_pair, "gather_rows_from_pair")(ctx, a_RD, b_SD, index_N, dst_ND);
  const char* op = "gather_rows_from_pair";
  require_cpu(op, ctx);
  for (const auto& [name, t] : {std::pair{"a", &a_RD}, std::pair{"b", &b_SD}})
    QUILL_CHECK(t->defined() && t->ndim() == 2, "{}: {} must be 2-D, got {}", op, name,
                t->defined() ? t->describe() : std::string("(undefined)"));
  QUILL_CHECK(b_SD.dim(1) == a_RD.dim(1) && b_SD.dtype() == a_RD.dtype(), "{}: b is {}, expected [*, {}] {} like a",
              op, b_SD.describe(), a_RD.dim(1), dtype_name(a_RD.dtype()));
  QUILL_CHECK(index_N.defined() && index_N.ndim() == 1, "{}: index must be 1-D [N], got {}", op,
              index_N.defined() ? index_N.describe() : std::string("(undefined)"));
  require_dtype(op, "index", index_N, DType::I32);
  const int64_t R = a_RD.dim(0), S = b_SD.dim(0), N = index_N.dim(0);
  QUILL_CHECK(dst_ND.defined() && dst_ND.shape() == Shape({N, a_RD.dim(1)}) && dst_ND.dtype() == a_RD.dtype(),
              "{}: dst is {}, expected [{}, {}] {}", op, dst_ND.defined() ? dst_ND.describe() : "(undefined)", N,
              a_RD.dim(1), dtype_name(a_RD.dtype()));
  const int32_t* index = index_N.data_as<int32_t>();
  for (int64_t i = 0; i < N; ++i)
    QUILL_CHECK(index[i] >= 0 && index[i] < R + S, "{}: index[{}] is {}, outside the {} + {} rows of a and b", op, i,
                index[i], R, S);
  const size_t row_bytes = static_cast<size_t>(a_RD.dim(1)) * dtype_size(a_RD.dtype());
  if (row_bytes == 0) return;
  const char* a = static_cast<const char*>(a_RD.data());
  const char* b = static_cast<const char*>(b_SD.data());
  char* dst = static_cast<char*>(dst_ND.data());
  for (int64_t i = 0; i < N; ++i) {
    const char* from = index[i] < R ? a + index[i] * row_bytes : b + (index[i] - R) * row_bytes;
    std::memcpy(dst + i * row_bytes, from, row_bytes);
  }
}

}  // namespace quill::ops
