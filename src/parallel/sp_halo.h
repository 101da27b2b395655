// The halo of a causal short convolution under sequence parallelism. Sequence parallelism splits a
// row's T positions into tp consecutive chunks of Tc = T / tp, rank r of the tensor-parallel group
// holding positions [r*Tc, (r+1)*Tc). A causal convolution of kernel K over a chunk needs the K-1
// positions before it: the previous ranks' last positions (several ranks' when Tc < K-1), zeros
// before position 0. Its backward sends those positions' gradients back to their owners.
//
// Shapes: chunk_TC [Tc, C] (this rank's positions), ext_EC [K-1+Tc, C] (the halo, then the chunk).
// Both calls are collective over `tp` (null or one rank: the halo is zeros, as on one device).
#pragma once

#include "comm/comm.h"
#include "ops/device_context.h"

namespace quill {

// [K-1 halo rows; the chunk]: what the convolution of this rank's positions reads.
Tensor gather_halo(const DeviceContext& ctx, const Tensor& chunk_TC, int64_t kernel, Comm* tp);
// dext [K-1+Tc, C] -> dchunk [Tc, C]: this rank's own rows plus the halo gradients that the later
// ranks computed for its positions. dchunk is dext's rows after the halo, added to in place (no copy: dext is the
// caller's temporary, consumed here).
Tensor scatter_halo_grad(const DeviceContext& ctx, const Tensor& dext_EC, int64_t kernel, Comm* tp);

}  // namespace quill
