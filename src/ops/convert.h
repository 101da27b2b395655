// Element-type conversion and device transfers, so layer code can move between precisions and
// devices without knowing the backend.
#pragma once

#include <memory>

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
// A point in the order of the transfers: reached once every transfer_async started before it is done.
// Lets the host work on the first of many copies while the rest are still under way (the CPU offload's
// pipelined copy down); on the CPU backend every copy is done on return, so a fence is reached at once.
struct TransferFence {
  std::shared_ptr<void> event;  // the backend's (a cudaEvent_t on a GPU); empty on the CPU
};
TransferFence transfer_fence(const DeviceContext& ctx);
// Blocks the host until `fence` is reached (the copies before it can be read on the host).
void wait_transfer_fence(const DeviceContext& ctx, const TransferFence& fence);
// Makes the calling host thread use ctx's device (a GPU's current device is per thread): for a thread that
// runs ops on a context made by another one (the combined step's second pass, base/pass_baton.h).
void bind_host_thread(const DeviceContext& ctx);

}  // namespace quill::ops
