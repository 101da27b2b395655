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
// Starts a step's gradients. kZero zeroes every gradient on its device. kOnFirstWrite zeroes nothing and
// marks every gradient unset: the step's first write to each overwrites it (layer_util.h), and
// settle_grads zeroes any gradient no write reached. Equal results; kOnFirstWrite saves a pass over every
// fp32 gradient and the first GEMM's read of it (docs/decisions/gradient-first-write.md).
enum class GradReset { kZero, kOnFirstWrite };
void zero_grads(ParamTable& table, const DeviceContext& ctx, GradReset how = GradReset::kOnFirstWrite);
// After a step's backward passes: zeroes the gradients still unset (parameters no row reached).
void settle_grads(ParamTable& table, const DeviceContext& ctx);

}  // namespace quill
