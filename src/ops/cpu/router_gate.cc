// CPU reference of the router's gate GEMMs (ops/router.h: router_gate_*): the linear ops of ops/linear.h in the
// gate weight's dtype (fp32, or double on the F64 path), an activation of another dtype widened to it first
// and a bf16 input gradient rounded once from it. The same arithmetic as linear_* on the widened tensors.
#include "ops/convert.h"
#include "ops/linear.h"
#include "ops/op_table.h"
#include "ops/router.h"

#include "ops/dispatch.h"

namespace quill::ops {
namespace {

using namespace quill::ops_detail;

// t in `dtype`: t itself when it has it, else a converted copy.
Tensor in_dtype(const Tensor& t, DType dtype) {
  if (t.dtype() == dtype) return t;
  Tensor out = Tensor::empty(t.shape(), dtype);
  convert(DeviceContext::cpu(), t, out);
  return out;
}

void check_gate(const char* op, const Tensor& w_XD) {
  QUILL_CHECK(w_XD.defined() && w_XD.ndim() == 2, "{}: w must be 2-D [X, D], got {}", op,
              w_XD.defined() ? w_XD.describe() : std::string("(undefined)"));
  QUILL_CHECK(w_XD.dtype() == DType::F32 || w_XD.dtype() == DType::F64, "{}: w has dtype {}, expected F32 or F64",
              op, dtype_name(w_XD.dtype()));
}

}  // namespace

void router_gate_forward(const DeviceContext& ctx, const Tensor& x_TD, const Tensor& w_XD, const Tensor& logits_TX) {
  if (ctx.device == Device::CUDA)
    return cuda_op(ctx, &OpTable::router_gate_forward, "router_gate_forward")(ctx, x_TD, w_XD, logits_TX);
  const char* op = "router_gate_forward";
  require_cpu(op, ctx);
  check_gate(op, w_XD);
  linear_forward(ctx, in_dtype(x_TD, w_XD.dtype()), w_XD, logits_TX);
}

void router_gate_backward_input(const DeviceContext& ctx, const Tensor& dlogits_TX, const Tensor& w_XD,
                                const Tensor& dx_TD) {
  if (ctx.device == Device::CUDA)
    return cuda_op(ctx, &OpTable::router_gate_backward_input, "router_gate_backward_input")(ctx, dlogits_TX, w_XD,
                                                                                            dx_TD);
  const char* op = "router_gate_backward_input";
  require_cpu(op, ctx);
  check_gate(op, w_XD);
  if (dx_TD.dtype() == w_XD.dtype()) return linear_backward_input(ctx, dlogits_TX, w_XD, dx_TD, false);
  Tensor dx = Tensor::empty(dx_TD.shape(), w_XD.dtype());
  linear_backward_input(ctx, dlogits_TX, w_XD, dx, false);
  convert(ctx, dx, dx_TD);
}

void router_gate_backward_weight(const DeviceContext& ctx, const Tensor& dlogits_TX, const Tensor& x_TD,
                                 const Tensor& dw_XD, bool accumulate) {
  if (ctx.device == Device::CUDA)
    return cuda_op(ctx, &OpTable::router_gate_backward_weight, "router_gate_backward_weight")(ctx, dlogits_TX, x_TD,
                                                                                              dw_XD, accumulate);
  const char* op = "router_gate_backward_weight";
  require_cpu(op, ctx);
  check_gate(op, dw_XD);
  linear_backward_weight(ctx, dlogits_TX, in_dtype(x_TD, dw_XD.dtype()), dw_XD, accumulate);
}

}  // namespace quill::ops
