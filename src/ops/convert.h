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
// Starts the same copy without waiting for it: on a GPU it runs on the copy stream after every op
// enqueued on the compute stream so far (so it reads their results), and the host returns at once;
// on the CPU backend it copies at once. The host tensor should come from ctx.host_pinned (pageable
// memory makes the copy synchronous). Neither tensor may be touched or released before
// wait_transfers (a device tensor released earlier could be reused under the copy).
void transfer_async(const DeviceContext& ctx, const Tensor& src, const Tensor& dst);
// Orders the compute stream after every transfer_async started so far (ops enqueued later see the
// copies' results); with `host`, also blocks the host until they are done (to read a host copy).
void wait_transfers(const DeviceContext& ctx, bool host);

}  // namespace quill::ops
