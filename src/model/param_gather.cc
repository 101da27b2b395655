#include "model/param_gather.h"

#include <cstring>
#include <map>

#include "base/error.h"
#include "model/param_placement.h"
#include "model/whole_param.h"
#include "ops/convert.h"
#include "parallel/host_reduce.h"

namespace quill {

namespace {

// Does the rank at `c` hold the canonical copy of its slice of a tensor of `spec` on `stage`?
bool holds_canonical(const ShardSpec& spec, int stage, const GridCoords& c) {
  return c.pp == stage && canonical_holder(spec, c);
}

}  // namespace

// Every param's `value` in `local` is this rank's whole slice on the host: onto rank 0.
static ParamTable gather_slices(const ParamTable& local, const DeviceContext& ctx, const Layout& layout,
                         const InklingConfig& config) {
  Comm* world = layout.world();
  if (world == nullptr || world->size() == 1) return local;
  const int me = layout.rank(), ranks = world->size();
  std::map<std::string, const Param*> mine;
  for (const Param& p : local.params()) mine[p.name] = &p;

  ParamTable whole;
  for (const ParamDecl& d : param_decls(config)) {
    int stage = 0;
    for (int64_t end = 0; stage < layout.spec().pp; ++stage) {
      end += layout.stage_layers()[static_cast<size_t>(stage)];
      if (d.layer < end) break;
    }
    ShardRule rule = d.rule;
    rule.stage = stage;
    // Every rank's slice of this tensor, from the grid alone.
    std::vector<ShardSpec> specs;
    std::vector<int64_t> recv(static_cast<size_t>(ranks), 0), send(static_cast<size_t>(ranks), 0);
    for (int r = 0; r < ranks; ++r) {
      const GridCoords c = layout.grid().coords(r);
      specs.push_back(make_shard_spec(d.name, d.shape, rule, layout.spec(), c));
      if (holds_canonical(specs.back(), stage, c)) recv[static_cast<size_t>(r)] = shape_numel(specs.back().local_shape);
    }
    const auto found = mine.find(d.name);
    const bool holder = recv[static_cast<size_t>(me)] > 0;
    QUILL_CHECK(!holder || found != mine.end(), "gather: rank {} should hold {} but its table has no such tensor", me,
                d.name);
    if (holder) send[0] = recv[static_cast<size_t>(me)];
    if (me != 0) std::fill(recv.begin(), recv.end(), 0);
    int64_t total = 0;
    for (int64_t n : recv) total += n;
    // The exchange is an all-to-all in which only rank 0 receives (the Comm interface has no
    // gather-v); GPU communicators move device tensors, so the slices are staged there.
    Tensor in_host = holder ? found->second->value : Tensor::empty({0}, DType::F32);
    Tensor out_host = Tensor::empty({total}, DType::F32);
    if (world->device() == Device::CPU) {
      world->all_to_all(in_host.view_flat(0, {in_host.numel()}), send, out_host, recv);
    } else {
      Tensor in = Tensor::empty({std::max<int64_t>(1, in_host.numel())}, DType::F32, *ctx.allocator);
      Tensor out = Tensor::empty({std::max<int64_t>(1, total)}, DType::F32, *ctx.allocator);
      if (in_host.numel() > 0) ops::transfer(ctx, in_host.view_flat(0, {in_host.numel()}), in.view_flat(0, {in_host.numel()}));
      world->all_to_all(in, send, out, recv);
      if (total > 0) ops::transfer(ctx, out.view_flat(0, {total}), out_host);
    }
    if (me != 0) continue;
    Param p = whole_param(d);
    if (holder) p.checkpoint_dtype = found->second->checkpoint_dtype;
    p.value = Tensor::empty(d.shape, DType::F32);
    p.compute = p.value;
    int64_t at = 0;
    for (int r = 0; r < ranks; ++r) {
      const int64_t n = recv[static_cast<size_t>(r)];
      if (n == 0) continue;
      for (const SliceRun& run : slice_runs(specs[static_cast<size_t>(r)]))
        std::memcpy(p.value.data_as<float>() + run.global_offset, out_host.data_as<float>() + at + run.local_offset,
                    static_cast<size_t>(run.length) * sizeof(float));
      at += n;
    }
    whole.params().push_back(std::move(p));
  }
  return whole;
}

ParamTable gather_whole(const ParamTable& table, const DeviceContext& ctx, const Layout& layout,
                        const InklingConfig& config) {
  return gather_slices(host_copy(table, ctx), ctx, layout, config);  // the masters' shards gathered first
}

ParamTable gather_whole_grads(const ParamTable& table, const DeviceContext& ctx, const Layout& layout,
                              const InklingConfig& config) {
  // Each bucket's buffer summed as the optimizer will sum it (over tp first where each rank holds
  // a share, then over the bucket's group), on a copy: the buffers themselves stay for the step.
  std::vector<Tensor> summed;
  for (const ParamBucket& b : table.buckets()) {
    Tensor g = Tensor::empty({b.numel}, DType::F32);
    ops::transfer(ctx, b.grads, g);
    if (b.sum_over_tp) all_reduce_host(b.tp_comm, ctx, g);
    all_reduce_host(b.comm, ctx, g);
    summed.push_back(g);
  }
  ParamTable local;
  for (const Param& p : table.params()) {
    Param q = p;  // every attribute as on this rank; the value becomes the summed gradient, on the host
    q.grad = Tensor();
    q.bucket = -1;
    q.bucket_offset = 0;
    q.value = p.bucket >= 0 ? summed[static_cast<size_t>(p.bucket)].view_flat(p.bucket_offset, p.shape).clone()
                            : Tensor::zeros(p.shape, DType::F32);
    q.compute = q.value;
    local.params().push_back(std::move(q));
  }
  ParamTable whole = gather_slices(local, ctx, layout, config);
  // The gradient also as `grad`; trainable as on this rank (frozen tensors have no gradient; every rank freezes alike).
  for (Param& p : whole.params()) {
    p.grad = p.value;
    if (const Param* mine = local.find(p.name)) p.trainable = mine->trainable;
  }
  return whole;
}

}  // namespace quill
