// Element-type conversion and device transfers, so layer code can move between precisions and
// devices without knowing the backend.
#pragma once

#include "ops/device_context.h"

namespace quill::ops {

// dst = src element by element (same shape; float dtypes F32/F64/BF16; same device as ctx).
void convert(const DeviceContext& ctx, const Tensor& src, const Tensor& dst);
// Sets every byte of t to zero (t on ctx's device).
void zero(const DeviceContext& ctx, const Tensor& t);
// Copies between a host tensor and a tensor on ctx's device (same shape and dtype; either
// direction; host to host on the CPU backend). Synchronous.
void transfer(const DeviceContext& ctx, const Tensor& src, const Tensor& dst);

}  // namespace quill::ops
