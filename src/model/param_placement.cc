#include "model/param_placement.h"

#include "ops/convert.h"

namespace quill {

bool computes_in_bf16(const Param& p) {
  if (p.shape.size() < 2) return false;
  // The precision policy (architecture.md): router, short convolutions and the relative-bias
  // tables stay fp32.
  for (const char* fp32_suffix : {"mlp.gate.weight", "sconv.weight", "rel_logits_proj.proj"})
    if (p.name.ends_with(fp32_suffix)) return false;
  return true;
}

void place_params(ParamTable& table, const DeviceContext& ctx, int64_t pad_multiple) {
  const std::vector<int64_t> offsets = table.flat_offsets();
  int64_t total = 0;
  for (const Param& p : table.params())
    if (p.trainable) total += shape_numel(p.shape);
  total = (total + pad_multiple - 1) / pad_multiple * pad_multiple;
  Tensor flat_values = Tensor::empty({total}, DType::F32, *ctx.allocator);
  ops::zero(ctx, flat_values);
  Tensor flat_grads = Tensor::empty({total}, DType::F32, *ctx.allocator);
  ops::zero(ctx, flat_grads);
  for (size_t i = 0; i < table.params().size(); ++i) {
    Param& p = table.params()[i];
    Tensor value = p.trainable ? flat_values.view_flat(offsets[i], p.shape)
                               : Tensor::empty(p.shape, DType::F32, *ctx.allocator);
    ops::transfer(ctx, p.value, value);  // host master -> its place (the same device on the CPU)
    p.value = value;
    p.grad = p.trainable ? flat_grads.view_flat(offsets[i], p.shape) : Tensor();
    const bool bf16 = ctx.device == Device::CUDA && computes_in_bf16(p);
    p.compute = bf16 ? Tensor::empty(p.shape, DType::BF16, *ctx.allocator) : p.value;
  }
  table.set_flat(flat_values, flat_grads);
  refresh_compute(table, ctx);
}

void refresh_compute(ParamTable& table, const DeviceContext& ctx) {
  for (Param& p : table.params())
    if (p.compute.defined() && p.compute.data() != p.value.data()) ops::convert(ctx, p.value, p.compute);
}

ParamTable host_copy(const ParamTable& table, const DeviceContext& ctx) {
  ParamTable copy;
  for (const Param& p : table.params()) {
    Param h = p;
    h.value = Tensor::empty(p.shape, DType::F32);
    ops::transfer(ctx, p.value, h.value);
    h.compute = h.value;
    h.grad = Tensor();
    copy.params().push_back(h);
  }
  return copy;
}

void zero_grads(ParamTable& table, const DeviceContext& ctx, GradReset how) {
  if (how == GradReset::kOnFirstWrite) {
    // (The flat buffer's padding past the last parameter was zeroed by place_params and is never written.)
    for (Param& p : table.params()) p.grad_unset = p.grad.defined();
    return;
  }
  for (Param& p : table.params()) p.grad_unset = false;
  if (table.flat_grads().defined()) {
    ops::zero(ctx, table.flat_grads());
    return;
  }
  for (Param& p : table.params())
    if (p.grad.defined()) ops::zero(ctx, p.grad);
}

void settle_grads(ParamTable& table, const DeviceContext& ctx) {
  for (Param& p : table.params()) {
    if (!p.grad_unset) continue;
    ops::zero(ctx, p.grad);
    p.grad_unset = false;
  }
}

}  // namespace quill
