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

void place_params(ParamTable& table, const DeviceContext& ctx) {
  for (Param& p : table.params()) {
    if (ctx.device == Device::CPU) {
      p.compute = p.value;
      continue;
    }
    Tensor value = Tensor::empty(p.shape, DType::F32, *ctx.allocator);
    ops::transfer(ctx, p.value, value);
    p.value = value;
    if (p.grad.defined()) {
      p.grad = Tensor::empty(p.shape, DType::F32, *ctx.allocator);
      ops::zero(ctx, p.grad);
    }
    p.compute = computes_in_bf16(p) ? Tensor::empty(p.shape, DType::BF16, *ctx.allocator) : p.value;
  }
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

void zero_grads(ParamTable& table, const DeviceContext& ctx) {
  for (Param& p : table.params())
    if (p.grad.defined()) ops::zero(ctx, p.grad);
}

}  // namespace quill
