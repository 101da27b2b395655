#include "model/expert_wgrad_pairs.h"

#include <vector>

#include "base/error.h"
#include "model/layer_util.h"
#include "ops/gather_rows.h"

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

// The merged order's row indexes into [held rows; this micro-batch's rows]: expert e's held rows, then its own.
Tensor merge_index(const DeviceContext& ctx, const Tensor& held_L, const Tensor& own_L) {
  const int64_t E = held_L.dim(0);
  QUILL_CHECK(own_L.dim(0) == E, "expert weight gradients: {} local experts held, {} now", E, own_L.dim(0));
  const int64_t* held = held_L.data_as<int64_t>();
  const int64_t* own = own_L.data_as<int64_t>();
  int64_t Rh = 0, N = 0;
  for (int64_t e = 0; e < E; ++e) Rh += held[e], N += held[e] + own[e];
  QUILL_CHECK(N < (int64_t{1} << 31), "expert weight gradients: {} rows exceed the I32 row index", N);
  Tensor host = Tensor::empty({N}, DType::I32);
  int32_t* index = host.data_as<int32_t>();
  int64_t at = 0, from_held = 0, from_own = Rh;
  for (int64_t e = 0; e < E; ++e) {
    for (int64_t r = 0; r < held[e]; ++r) index[at++] = static_cast<int32_t>(from_held++);
    for (int64_t r = 0; r < own[e]; ++r) index[at++] = static_cast<int32_t>(from_own++);
  }
  if (ctx.device == Device::CPU) return host;
  Tensor on_device = new_tensor(ctx, {N}, DType::I32);
  ops::transfer(ctx, host, on_device);
  return on_device;
}

Tensor merged(const DeviceContext& ctx, const Tensor& held, const Tensor& own, const Tensor& index) {
  Tensor out = new_activation(ctx, {index.dim(0), own.dim(1)});
  ops::gather_rows_from_pair(ctx, held, own, index, out);
  return out;
}

}  // namespace

ExpertRows HeldExpertRows::merge_with(const DeviceContext& ctx, const ExpertRows& rows) {
  QUILL_CHECK(holding(), "expert weight gradients: no rows held for this micro-batch's pair");
  ExpertRows out;
  {
    const Tensor index = merge_index(ctx, held_.counts_L, rows.counts_L);
    out.dy2_RD = merged(ctx, held_.dy2_RD, rows.dy2_RD, index);
    out.a_RF = merged(ctx, held_.a_RF, rows.a_RF, index);
    out.dh13_R2F = merged(ctx, held_.dh13_R2F, rows.dh13_R2F, index);
    out.x_RD = merged(ctx, held_.x_RD, rows.x_RD, index);
  }
  const int64_t E = rows.counts_L.dim(0);
  out.counts_L = Tensor::empty({E}, DType::I64);
  for (int64_t e = 0; e < E; ++e)
    out.counts_L.data_as<int64_t>()[e] = held_.counts_L.data_as<int64_t>()[e] + rows.counts_L.data_as<int64_t>()[e];
  held_ = ExpertRows{};
  return out;
}

void write_expert_weight_grads(const DeviceContext& ctx, const ExpertRows& rows, const Param& w2, const Param& w13) {
  if (rows.x_RD.dim(0) == 0) return;  // no rows: the gradients get no write (settle_grads zeroes unwritten ones)
  write_grouped_weight_grad(ctx, rows.dy2_RD, rows.a_RF, rows.counts_L, w2);
  write_grouped_weight_grad(ctx, rows.dh13_R2F, rows.x_RD, rows.counts_L, w13);
}

}  // namespace quill
