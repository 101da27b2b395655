// Helpers for op entry points: device checks and the float/double dispatch of the CPU reference.
// The CPU ops are templates on the element type; float is the reference the model runs in, double
// is what the finite-difference gradient tests run in.
#pragma once

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

// Calls fn.template operator()<T>() with T = float or double from the dtype of `t`.
template <typename Fn>
void dispatch_float(const char* op, const Tensor& t, Fn&& fn) {
  if (t.dtype() == DType::F32) fn.template operator()<float>();
  else if (t.dtype() == DType::F64) fn.template operator()<double>();
  else QUILL_FAIL("{}: CPU reference supports F32 and F64, got {}", op, dtype_name(t.dtype()));
}

}  // namespace quill::ops_detail
