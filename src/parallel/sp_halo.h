// The halo of a causal short convolution under sequence parallelism. Sequence parallelism splits a
// row's T positions into tp consecutive chunks of Tc = T / tp, rank r of the tensor-parallel group
// holding positions [r*Tc, (r+1)*Tc). A causal convolution of kernel K over a chunk needs the K-1
// positions before it: the previous ranks' last positions (several ranks' when Tc < K-1), zeros
// before position 0. Its backward sends those positions' gradients back to their owners.
//
// The convolution reads the halo beside the chunk (ops/short_conv.h), so neither call copies the chunk.
// Shapes: chunk_TC [Tc, C] (this rank's positions), halo_HC [K-1, C] (the positions before it).
// Both calls are collective over `tp` (null or one rank: the halo is zeros, as on one device).
#pragma once

#include "comm/comm.h"
#include "ops/device_context.h"

namespace quill {

// The K-1 rows before this rank's chunk: what its convolution reads before its first position.
Tensor gather_halo(const DeviceContext& ctx, const Tensor& chunk_TC, int64_t kernel, Comm* tp);
// dchunk [Tc, C] += the halo gradients dhalo [K-1, C] that the later ranks computed for this rank's positions
// (in place); this rank's own dhalo goes to the earlier ranks.
void scatter_halo_grad(const DeviceContext& ctx, const Tensor& dchunk_TC, const Tensor& dhalo_HC, int64_t kernel,
                       Comm* tp);

}  // namespace quill
