// Where the parameter table lives. On the CPU reference every tensor is on the host and `compute`
// is `value`. On a GPU the fp32 master `value` and `grad` live on the device, and `compute` is a
// bf16 copy for the matrices the GEMMs read; the tensors the precision policy keeps in fp32
// (1-D vectors, the router, the short convolutions, the relative-bias tables) compute from `value`.
#pragma once

#include "model/params.h"
#include "ops/device_context.h"

namespace quill {

// Does parameter `p` compute in bf16 on the GPU?
bool computes_in_bf16(const Param& p);

// Moves a host table onto ctx's device (no-op on the CPU backend) and sets up compute and grad.
// The flat buffers are padded with zeros to a multiple of pad_multiple elements (the
// data-parallel size, so that they split into equal shards).
void place_params(ParamTable& table, const DeviceContext& ctx, int64_t pad_multiple = 1);
// Refreshes every bf16 compute copy from its fp32 value (after loading or an update on the host).
void refresh_compute(ParamTable& table, const DeviceContext& ctx);
// A host copy of the values (checkpoint dtypes, flags and names kept), for saving.
ParamTable host_copy(const ParamTable& table, const DeviceContext& ctx);
// Zeroes every gradient on its device.
void zero_grads(ParamTable& table, const DeviceContext& ctx);

}  // namespace quill
