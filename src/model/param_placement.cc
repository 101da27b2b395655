#include "model/param_placement.h"

#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "base/parallel_memory.h"
#include "model/bucket_split.h"
#include "model/offload_split.h"
#include "model/transient_compute.h"
#include "ops/convert.h"

namespace quill {

bool computes_in_bf16(const Param& p) {
  if (p.shape.size() < 2) return false;
  // The precision policy (docs/decisions/cuda-precision.md): router, short convolutions and the
  // relative-bias tables stay fp32.
  for (const char* fp32_suffix : {"mlp.gate.weight", "sconv.weight", "rel_logits_proj.proj"})
    if (p.name.ends_with(fp32_suffix)) return false;
  return true;
}

namespace {

struct BucketGroup {
  GroupKind kind;
  int size, rank;
  Comm* comm;
};

BucketGroup group_of(const Param& p, const Layout& layout) {
  const GroupKind kind = p.shard.reduce_over;
  const RankGroup g = layout.grid().group(kind, layout.rank());
  return {kind, g.size(), g.index, layout.comm(kind)};
}

// Copies host elements into the master of shard-local [local, local + n), split at the offload
// boundary (the host part by memcpy, the device part by a transfer).
void write_master(const ParamBucket& b, const DeviceContext& ctx, const Tensor& host, int64_t local, int64_t n) {
  const int64_t split = std::clamp(b.offload_end - local, int64_t{0}, n);
  if (split > 0) parallel_memcpy(b.master_range(local, split).data(), host.data(), static_cast<size_t>(split) * sizeof(float));
  if (split < n) ops::transfer(ctx, host.view_flat(split, {n - split}), b.master_range(local + split, n - split));
}

// Fills bucket `b`'s buffers from its members' host values and points the members at them.
// `offloaded`: shard-local elements [0, offloaded) keep their master in pinned host memory.
void fill_bucket(ParamTable& table, ParamBucket& b, const DeviceContext& ctx, int64_t offloaded) {
  Allocator& alloc = *ctx.allocator;
  b.grads = Tensor::empty({b.numel}, DType::F32, alloc);
  ops::zero(ctx, b.grads);
  b.compute = Tensor::empty({b.numel}, b.compute_dtype, alloc);
  ops::zero(ctx, b.compute);
  const int64_t shard = b.numel / b.group_size;
  b.shard_begin = b.group_rank * shard;
  b.shard_end = b.shard_begin + shard;
  b.offload_end = offloaded;
  if (offloaded > 0) b.host_master = Tensor::zeros({offloaded}, DType::F32, *ctx.host_pinned);
  if (b.master_is_compute()) {
    b.master = b.compute.view_flat(b.shard_begin + offloaded, {shard - offloaded});
  } else {
    b.master = Tensor::empty({shard - offloaded}, DType::F32, alloc);
    ops::zero(ctx, b.master);
  }
  for (size_t i : b.members) {
    Param& p = table.params()[i];
    const int64_t n = shape_numel(p.shape), o = p.bucket_offset;
    const Tensor host = p.value;
    const Tensor compute = b.compute.view_flat(o, p.shape);
    const int64_t begin = std::max(o, b.shard_begin), end = std::min(o + n, b.shard_end);
    if (b.master_is_compute()) {
      ops::transfer(ctx, host, compute);
      // The offloaded range's master is a host copy of the same values.
      const int64_t hb = std::max(o, b.shard_begin), he = std::min(o + n, b.shard_begin + offloaded);
      if (hb < he)
        parallel_memcpy(b.host_master.data_as<float>() + (hb - b.shard_begin), host.data_as<float>() + (hb - o),
                        static_cast<size_t>(he - hb) * sizeof(float));
    } else {
      Tensor staged = Tensor::empty(p.shape, DType::F32, alloc);
      ops::transfer(ctx, host, staged);
      ops::convert(ctx, staged, compute);
      if (begin < end) write_master(b, ctx, host.view_flat(begin - o, {end - begin}), begin - b.shard_begin, end - begin);
    }
    p.compute = compute;
    p.grad = b.grads.view_flat(o, p.shape);
    // A member's fp32 value is one tensor only when its whole master is one device tensor.
    const bool whole_master = b.master_is_compute() || (b.group_size == 1 && offloaded == 0);
    p.value = !whole_master ? Tensor() : b.master_is_compute() ? compute : b.master.view_flat(o - b.shard_begin, p.shape);
  }
}

void all_gather_compute(const ParamBucket& b) {
  if (b.comm == nullptr) return;
  b.comm->all_gather(b.compute.view_flat(b.shard_begin, {b.shard_end - b.shard_begin}), b.compute);
}

}  // namespace

void place_params(ParamTable& table, const DeviceContext& ctx) {
  const Layout single = Layout::single(1);
  place_params(table, ctx, single);
}

void place_params(ParamTable& table, const DeviceContext& ctx, const Layout& layout) {
  place_params(table, ctx, layout, 0.0);
}

void place_params(ParamTable& table, const DeviceContext& ctx, const Layout& layout, double offload_fraction) {
  place_params(table, ctx, layout, offload_fraction, 0);
}

void place_params(ParamTable& table, const DeviceContext& ctx, const Layout& layout, double offload_fraction,
                  int64_t bucket_elements) {
  QUILL_CHECK(!table.placed(), "place_params: the table is already placed");
  // The kinds of trainable parameter (one per reduction group, compute dtype and tensor-parallel
  // role), in the order their first member appears in the table; each kind's members in table order.
  std::vector<ParamBucket> kinds;
  for (size_t i = 0; i < table.params().size(); ++i) {
    Param& p = table.params()[i];
    if (!p.trainable) {
      // Frozen tensors and buffers: a whole fp32 value on the device, and the compute copy.
      Tensor value = Tensor::empty(p.shape, DType::F32, *ctx.allocator);
      ops::transfer(ctx, p.value, value);
      p.value = value;
      p.grad = Tensor();
      const bool bf16 = ctx.device == Device::CUDA && computes_in_bf16(p);
      p.compute = bf16 ? Tensor::empty(p.shape, DType::BF16, *ctx.allocator) : p.value;
      if (bf16) ops::convert(ctx, p.value, p.compute);
      continue;
    }
    const BucketGroup g = group_of(p, layout);
    const DType dtype = ctx.device == Device::CUDA && computes_in_bf16(p) ? DType::BF16 : DType::F32;
    const bool replicated = p.shard.tp_replicated && layout.spec().tp > 1;
    const bool sum_over_tp = p.shard.sum_grad_over_tp;
    const bool transient = has_transient_compute(p, ctx.device);
    auto it = std::find_if(kinds.begin(), kinds.end(), [&](const ParamBucket& b) {
      return b.group == group_kind_name(g.kind) && b.compute_dtype == dtype && b.tp_replicated == replicated &&
             b.sum_over_tp == sum_over_tp && b.compute_transient == transient;
    });
    if (it == kinds.end()) {
      ParamBucket b;
      b.group = group_kind_name(g.kind);
      b.comm = g.comm;
      b.group_size = g.size;
      b.group_rank = g.rank;
      b.compute_dtype = dtype;
      b.tp_replicated = replicated;
      b.counts_in_norm = !replicated || layout.coords().tp == 0;
      b.sum_over_tp = sum_over_tp;
      b.tp_comm = sum_over_tp ? layout.comm(GroupKind::TP) : nullptr;
      b.compute_transient = transient;
      kinds.push_back(b);
      it = kinds.end() - 1;
    }
    it->members.push_back(i);
  }
  // Each kind cut into buckets of whole layers (model/bucket_split.h): a kind's buckets follow one
  // another, the last layers first.
  std::vector<ParamBucket>& buckets = table.buckets();
  for (const ParamBucket& kind : kinds) {
    for (std::vector<size_t>& members : split_bucket_by_layers(table.params(), kind.members, bucket_elements)) {
      ParamBucket b = kind;
      b.members = std::move(members);
      b.first_layer = table.params()[b.members.front()].layer;
      b.last_layer = b.first_layer;
      for (size_t i : b.members) {
        Param& p = table.params()[i];
        p.bucket = static_cast<int>(buckets.size());
        p.bucket_offset = b.numel;
        b.numel += shape_numel(p.shape);
        b.first_layer = std::min(b.first_layer, p.layer);
        b.last_layer = std::max(b.last_layer, p.layer);
      }
      buckets.push_back(std::move(b));
    }
  }
  std::vector<int64_t> shards;
  for (ParamBucket& b : buckets) {
    b.numel = (b.numel + b.group_size - 1) / b.group_size * b.group_size;
    shards.push_back(b.numel / b.group_size);
  }
  const std::vector<int64_t> offloaded = offload_split(shards, offload_fraction);
  for (size_t i = 0; i < buckets.size(); ++i) {
    fill_bucket(table, buckets[i], ctx, offloaded[i]);
    // Each FP8 bucket's copies made (its buffer is whole: placement writes every member on every rank).
    release_transient_compute(table, buckets[i], ctx);
  }
  release_transient_compute(table, ctx);  // the frozen FP8 matrices'
  table.set_placed();
}

void refresh_compute(ParamTable& table, const DeviceContext& ctx) {
  hold_transient_compute(table, ctx);
  for (const ParamBucket& b : table.buckets()) {
    const int64_t shard = b.shard_end - b.shard_begin, h = b.offload_end;
    if (h > 0) {
      // The offloaded head: converted on the host (as the host AdamW rounds), then copied over.
      Tensor staged = b.host_master;
      if (!b.master_is_compute()) {
        staged = Tensor::empty({h}, b.compute_dtype);
        ops::convert(DeviceContext::cpu(), b.host_master, staged);
      }
      ops::transfer(ctx, staged, b.compute.view_flat(b.shard_begin, {h}));
    }
    if (!b.master_is_compute() && h < shard) ops::convert(ctx, b.master, b.compute.view_flat(b.shard_begin + h, {shard - h}));
    all_gather_compute(b);
  }
  for (Param& p : table.params()) {
    if (p.trainable) continue;
    if (!p.compute.defined() && has_transient_compute(p, ctx.device))
      p.compute = Tensor::empty(p.shape, DType::BF16, *ctx.allocator);
    if (p.compute.defined() && p.compute.data() != p.value.data()) ops::convert(ctx, p.value, p.compute);
  }
  table.compute_changed();
  release_transient_compute(table, ctx);
}

namespace {

// The whole fp32 master of bucket b in host memory: the shards gathered over the group in chunks of
// at most `chunk` elements per rank, so the device needs group_size * chunk elements at a time.
Tensor gather_master(const ParamBucket& b, const DeviceContext& ctx, int64_t chunk = int64_t{1} << 24) {
  Tensor host = Tensor::empty({b.numel}, DType::F32);
  const int64_t shard = b.shard_end - b.shard_begin, h = b.offload_end;
  if (b.comm == nullptr) {
    if (h > 0) std::memcpy(host.data(), b.host_master.data(), static_cast<size_t>(h) * sizeof(float));
    if (h < shard) ops::transfer(ctx, b.master, host.view_flat(h, {shard - h}));
    return host;
  }
  const int64_t c = std::min(chunk, shard);
  Tensor out = Tensor::empty({c * b.group_size}, DType::F32, *ctx.allocator);
  Tensor staged = Tensor::empty({c * b.group_size}, DType::F32);
  for (int64_t at = 0; at < shard; at += c) {
    const int64_t n = std::min(c, shard - at);
    const Tensor mine = out.view_flat(b.group_rank * n, {n});
    // This rank's elements [at, at + n): the offloaded ones copied up, the rest a device copy.
    const int64_t up = std::clamp(h - at, int64_t{0}, n);
    if (up > 0) ops::transfer(ctx, b.host_master.view_flat(at, {up}), mine.view_flat(0, {up}));
    if (up < n) ops::convert(ctx, b.master_range(at + up, n - up), mine.view_flat(up, {n - up}));
    b.comm->all_gather(mine, out.view_flat(0, {n * b.group_size}));
    ops::transfer(ctx, out.view_flat(0, {n * b.group_size}), staged.view_flat(0, {n * b.group_size}));
    for (int r = 0; r < b.group_size; ++r)
      std::memcpy(host.data_as<float>() + r * shard + at, staged.data_as<float>() + r * n, n * sizeof(float));
  }
  return host;
}

}  // namespace

ParamTable host_copy(const ParamTable& table, const DeviceContext& ctx) {
  std::vector<Tensor> gathered;
  for (const ParamBucket& b : table.buckets())
    gathered.push_back((b.group_size > 1 || b.offload_end > 0) && !b.master_is_compute() ? gather_master(b, ctx) : Tensor());
  ParamTable copy;
  for (const Param& p : table.params()) {
    Param h = p;
    h.value = Tensor::empty(p.shape, DType::F32);
    if (p.value.defined()) {
      ops::transfer(ctx, p.value, h.value);
    } else {
      const Tensor& all = gathered[static_cast<size_t>(p.bucket)];
      std::memcpy(h.value.data(), all.data_as<float>() + p.bucket_offset, h.value.nbytes());
    }
    h.compute = h.value;
    h.grad = Tensor();
    h.bucket = -1;
    copy.params().push_back(h);
  }
  return copy;
}

MasterBytes master_bytes(const ParamTable& table) {
  MasterBytes m;
  for (const ParamBucket& b : table.buckets()) {
    const int64_t f32 = static_cast<int64_t>(sizeof(float));
    m.owned += (b.master.numel() + b.offload_end) * f32;
    if (!b.master_is_compute()) m.allocated += b.master.numel() * f32;
    m.host += b.offload_end * f32;
  }
  return m;
}

void zero_grads(ParamTable& table, const DeviceContext& ctx, GradReset how) {
  if (how == GradReset::kOnFirstWrite) {
    // (A bucket's padding past its last member was zeroed by place_params and is never written.)
    for (Param& p : table.params()) p.grad_unset = p.grad.defined();
    return;
  }
  for (Param& p : table.params()) p.grad_unset = false;
  for (ParamBucket& b : table.buckets()) ops::zero(ctx, b.grads);
}

namespace {

void settle_grad(Param& p, const DeviceContext& ctx) {
  if (!p.grad_unset) return;
  ops::zero(ctx, p.grad);
  p.grad_unset = false;
}

}  // namespace

void settle_grads(ParamTable& table, const DeviceContext& ctx) {
  for (Param& p : table.params()) settle_grad(p, ctx);
}

void settle_grads(ParamTable& table, const DeviceContext& ctx, const std::vector<size_t>& members) {
  for (size_t i : members) settle_grad(table.params()[i], ctx);
}

}  // namespace quill
