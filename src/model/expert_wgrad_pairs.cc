#include "model/expert_wgrad_pairs.h"

#include <vector>

#include "base/error.h"
#include "model/layer_util.h"
#include "model/param_gemm.h"
#include "ops/gather_rows.h"
#include "ops/moe.h"

namespace quill {

ExpertWgradTurn expert_wgrad_turn(int64_t k, int64_t n, int per_gemm) {
  QUILL_CHECK(per_gemm == 1 || per_gemm == 2, "--moe-expert-wgrad-micro-batches must be 1 or 2, got {}", per_gemm);
  QUILL_CHECK(k >= 0 && k < n, "expert weight gradients: backward {} of a step of {}", k, n);
  if (per_gemm == 1) return ExpertWgradTurn::Write;
  if (k % 2 == 1) return ExpertWgradTurn::WriteWithHeld;
  return k + 1 < n ? ExpertWgradTurn::Hold : ExpertWgradTurn::Write;
}

void HeldExpertRows::hold(const ExpertRows& rows) {
  QUILL_CHECK(!holding(), "expert weight gradients: a micro-batch's rows are held twice (a backward was skipped)");
  QUILL_CHECK(!rows.empty(), "expert weight gradients: holding rows without their counts");
  held_ = rows;
}

void HeldExpertRows::expect_none(int64_t layer) const {
  QUILL_CHECK(!holding(), "expert weight gradients of layer {}: rows held by the previous micro-batch were never "
              "written (its pair's backward did not run)", layer);
}

namespace {

// dw(p) (+)= the GEMM over held's rows and own's together (the write rule of grad_write). FP8 matrices merge the
// rows here (their FP8 weight-gradient GEMMs read one quantised operand); bf16 ones (and FP8 ones under
// --no-fp8-wgrad) leave it to the op (in place on the GPU's kernel).
void write_pair_weight_grad(const DeviceContext& ctx, const Tensor& dy_held, const Tensor& x_held,
                            const Tensor& counts_held, const Tensor& dy_own, const Tensor& x_own,
                            const Tensor& counts_own, const Param& p) {
  const GradWrite w = grad_write(ctx, p);
  if (!p.fp8_wgrad)
    return ops::grouped_linear_backward_weight_pair(ctx, dy_held, x_held, counts_held, dy_own, x_own, counts_own,
                                                    w.grad, w.accumulate);
  const ops::MergedExpertRows m = ops::merge_expert_rows(ctx, dy_held, x_held, counts_held, dy_own, x_own, counts_own);
  param_grouped_backward_weight(ctx, m.dy, m.x, m.counts, p, w.grad, w.accumulate);
}

}  // namespace

void HeldExpertRows::write_with(const DeviceContext& ctx, const ExpertRows& rows, const Param& w2, const Param& w13) {
  QUILL_CHECK(holding(), "expert weight gradients: no rows held for this micro-batch's pair");
  const ExpertRows held = held_;
  held_ = ExpertRows{};
  QUILL_CHECK(held.counts_L.dim(0) == rows.counts_L.dim(0), "expert weight gradients: {} local experts held, {} now",
              held.counts_L.dim(0), rows.counts_L.dim(0));
  if (held.x_RD.dim(0) + rows.x_RD.dim(0) == 0) return;  // no rows: no write (settle_grads zeroes unwritten ones)
  write_pair_weight_grad(ctx, held.dy2_RD, held.a_RF, held.counts_L, rows.dy2_RD, rows.a_RF, rows.counts_L, w2);
  write_pair_weight_grad(ctx, held.dh13_R2F, held.x_RD, held.counts_L, rows.dh13_R2F, rows.x_RD, rows.counts_L, w13);
}

void write_expert_weight_grads(const DeviceContext& ctx, const ExpertRows& rows, const Param& w2, const Param& w13) {
  if (rows.x_RD.dim(0) == 0) return;  // no rows: the gradients get no write (settle_grads zeroes unwritten ones)
  write_grouped_weight_grad(ctx, rows.dy2_RD, rows.a_RF, rows.counts_L, w2);
  write_grouped_weight_grad(ctx, rows.dh13_R2F, rows.x_RD, rows.counts_L, w13);
}

}  // namespace quill
