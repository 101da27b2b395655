// Where the parameter table lives, and how this rank holds it. On the CPU reference every tensor is
// fp32 on the host. On a GPU the ops read bf16 compute copies of the matrices; the tensors the
// precision policy keeps in fp32 (1-D vectors, the router, the short convolutions, the
// relative-bias tables) compute in fp32.
//
// Placement groups the trainable parameters into buckets (model/params.h): by the group that
// reduces their gradients (routed experts: expert data parallel "edp"; the rest: "dp-cp") and by
// compute dtype, each such kind cut into buckets of whole layers by the DDP bucket size. Each rank keeps the fp32 master weights of its shard of every bucket only (the
// distributed optimizer); the compute copies are whole and refreshed by an all-gather in their own
// dtype (bf16 on a GPU) after each update.
#pragma once

#include "model/params.h"
#include "ops/device_context.h"
#include "parallel/layout.h"

namespace quill {

// Does parameter `p` compute in bf16 on the GPU?
bool computes_in_bf16(const Param& p);

// Moves a host table onto ctx's device and builds its buckets, sharded over `layout`'s groups
// (collective over them: every rank of the layout calls it). The layout must outlive the table.
void place_params(ParamTable& table, const DeviceContext& ctx, const Layout& layout);
// The same with CPU offload of the optimizer: in every bucket the head of this rank's shard that
// model/offload_split.h picks for `offload_fraction` keeps its fp32 master in ctx.host_pinned
// (ParamBucket::host_master); the device master covers the rest.
void place_params(ParamTable& table, const DeviceContext& ctx, const Layout& layout, double offload_fraction);
// The same with each kind of parameter cut into buckets of whole layers of at least `bucket_elements`
// elements (model/bucket_split.h; Megatron's --ddp-bucket-size; <= 0: one bucket per kind, as above).
void place_params(ParamTable& table, const DeviceContext& ctx, const Layout& layout, double offload_fraction,
                  int64_t bucket_elements);
// One rank: nothing is sharded.
void place_params(ParamTable& table, const DeviceContext& ctx);
// Rewrites every compute copy from the fp32 masters (after loading or resuming): each rank converts
// its shard, then each bucket's group all-gathers the copies. Collective.
void refresh_compute(ParamTable& table, const DeviceContext& ctx);
// Every value whole and fp32 on the host (checkpoint dtypes, flags and names kept), for saving:
// the shards of the masters gathered in chunks over their groups. Collective.
ParamTable host_copy(const ParamTable& table, const DeviceContext& ctx);
// The bytes this rank holds for the optimizer's fp32 masters: those it owns (its shards), those
// allocated on the device for them beside the compute copies (a master that is its own compute copy
// costs none), and those in host memory under CPU offload (part of owned).
struct MasterBytes {
  int64_t owned = 0, allocated = 0, host = 0;
};
MasterBytes master_bytes(const ParamTable& table);
// Starts a step's gradients. kZero zeroes every gradient on its device. kOnFirstWrite zeroes nothing and
// marks every gradient unset: the step's first write to each overwrites it (layer_util.h), and
// settle_grads zeroes any gradient no write reached. Equal results; kOnFirstWrite saves a pass over every
// fp32 gradient and the first GEMM's read of it (docs/decisions/gradient-first-write.md).
enum class GradReset { kZero, kOnFirstWrite };
void zero_grads(ParamTable& table, const DeviceContext& ctx, GradReset how = GradReset::kOnFirstWrite);
// After a step's backward passes: zeroes the gradients still unset (parameters no row reached).
void settle_grads(ParamTable& table, const DeviceContext& ctx);
// The same for the parameters `members` only (one bucket's, when its reduction starts during the backward).
void settle_grads(ParamTable& table, const DeviceContext& ctx, const std::vector<size_t>& members);

}  // namespace quill
