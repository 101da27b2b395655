// Helpers for op entry points: device checks and the float/double dispatch of the CPU reference.
// The CPU ops are templates on the element type; float is the reference the model runs in, double
// is what the finite-difference gradient tests run in.
#pragma once

#include <cstdint>
#include <limits>
#include <string>

#include "base/error.h"
#include "ops/device_context.h"

namespace quill::ops_detail {

inline void require_cpu(const char* op, const DeviceContext& ctx) {
  QUILL_CHECK(ctx.device == Device::CPU, "{}: the CUDA backend is not built into this op yet", op);
}

inline void require_shape(const char* op, const char* name, const Tensor& t, const Shape& shape) {
  QUILL_CHECK(t.defined() && t.shape() == shape, "{}: {} has shape {}, expected {}", op, name,
              t.defined() ? shape_str(t.shape()) : std::string("(undefined)"), shape_str(shape));
}

inline void require_dtype(const char* op, const char* name, const Tensor& t, DType dtype) {
  QUILL_CHECK(t.dtype() == dtype, "{}: {} has dtype {}, expected {}", op, name, dtype_name(t.dtype()),
              dtype_name(dtype));
}

// The short convolution's optional halo (ops/short_conv.h): [K-1, C] of x's dtype, when defined.
inline void require_conv_halo(const char* op, const char* name, const Tensor& t, const Tensor& x_TC, int64_t K) {
  if (!t.defined()) return;
  require_shape(op, name, t, {K - 1, x_TC.dim(1)});
  require_dtype(op, name, t, x_TC.dtype());
}

// Its forward's halo: a halo as above that the output y does not alias.
inline void require_conv_halo_input(const char* op, const Tensor& x_TC, int64_t K, const Tensor& y_TC,
                                    const Tensor& halo_HC) {
  require_conv_halo(op, "halo", halo_HC, x_TC, K);
  QUILL_CHECK(!halo_HC.defined() || halo_HC.numel() == 0 || y_TC.data() != halo_HC.data(), "{}: y must not alias halo",
              op);
}

// Its backward's halo and halo gradient: each a halo as above, the gradient given exactly when the halo is and
// aliasing none of the backward's other tensors.
inline void require_conv_halo_pair(const char* op, const Tensor& x_TC, int64_t K, const Tensor& dy_TC,
                                   const Tensor& dx_TC, const Tensor& halo_HC, const Tensor& dhalo_HC) {
  require_conv_halo(op, "halo", halo_HC, x_TC, K);
  QUILL_CHECK(halo_HC.defined() == dhalo_HC.defined(), "{}: dhalo is given exactly when halo is ({}, {})", op,
              halo_HC.defined() ? "halo given" : "no halo", dhalo_HC.defined() ? "dhalo given" : "no dhalo");
  require_conv_halo(op, "dhalo", dhalo_HC, x_TC, K);
  QUILL_CHECK(!dhalo_HC.defined() || dhalo_HC.numel() == 0 ||
                  (dhalo_HC.data() != dy_TC.data() && dhalo_HC.data() != halo_HC.data() && dhalo_HC.data() != dx_TC.data()),
              "{}: dhalo must not alias dy, dx or halo", op);
}

// A grouped op's row counts: counts_E I64 [E] in host memory (any length when E < 0), non-negative,
// summing to `rows`. Returns them.
inline const int64_t* require_group_counts(const char* op, const Tensor& counts_E, int64_t rows, int64_t E = -1) {
  QUILL_CHECK(counts_E.defined() && counts_E.ndim() == 1 && (E < 0 || counts_E.dim(0) == E),
              "{}: counts_E has shape {}, expected [{}]", op,
              counts_E.defined() ? shape_str(counts_E.shape()) : std::string("(undefined)"),
              E < 0 ? std::string("E") : std::to_string(E));
  require_dtype(op, "counts_E", counts_E, DType::I64);
  QUILL_CHECK(counts_E.device() == Device::CPU, "{}: counts_E must be in host memory, got {}", op, counts_E.describe());
  const int64_t* counts = counts_E.data_as<int64_t>();
  int64_t total = 0;
  for (int64_t e = 0; e < counts_E.numel(); ++e) {
    QUILL_CHECK(counts[e] >= 0, "{}: counts_E[{}] is {}, expected >= 0", op, e, counts[e]);
    total += counts[e];
  }
  QUILL_CHECK(total == rows, "{}: counts_E sums to {}, but there are {} rows", op, total, rows);
  return counts;
}

// The MoE row ops' slot rows (ops/moe.h): I32 [n_tokens, k] with k > 0 (equal to `k` when given), at most
// INT32_MAX rows. Returns k. Its values (a permutation of the rows) are each backend's to check.
inline int64_t require_slot_rows(const char* op, const Tensor& slot_rows_Nk, int64_t n_tokens, int64_t k = -1) {
  QUILL_CHECK(slot_rows_Nk.defined() && slot_rows_Nk.ndim() == 2, "{}: slot_rows_Nk must be 2-D, got {}", op,
              slot_rows_Nk.defined() ? shape_str(slot_rows_Nk.shape()) : std::string("(undefined)"));
  if (k < 0) k = slot_rows_Nk.dim(1);
  QUILL_CHECK(k > 0, "{}: slot_rows_Nk has {} slots per token, expected > 0", op, k);
  require_shape(op, "slot_rows_Nk", slot_rows_Nk, {n_tokens, k});
  require_dtype(op, "slot_rows_Nk", slot_rows_Nk, DType::I32);
  QUILL_CHECK(n_tokens * k <= std::numeric_limits<int32_t>::max(), "{}: {} rows do not fit the I32 slot_rows_Nk", op,
              n_tokens * k);
  return k;
}

// Calls fn.template operator()<T>() with T = float or double from the dtype of `t`.
template <typename Fn>
void dispatch_float(const char* op, const Tensor& t, Fn&& fn) {
  if (t.dtype() == DType::F32) fn.template operator()<float>();
  else if (t.dtype() == DType::F64) fn.template operator()<double>();
  else QUILL_FAIL("{}: CPU reference supports F32 and F64, got {}", op, dtype_name(t.dtype()));
}

}  // namespace quill::ops_detail
