// --moe-expert-wgrad-micro-batches 2 (docs/decisions/expert-wgrad-pairs.md): the routed experts' two weight
// gradients (W2 and W13) of two consecutive micro-batches computed by one grouped GEMM each, over both
// micro-batches' rows, instead of one GEMM per micro-batch.
//
// Why: at a seed rank's ~384 rows per expert the weight gradient is bound by the read-modify-write of the fp32
// gradient (64 MiB per expert and matrix), not by its product; summing two micro-batches' rows in the
// contraction halves those passes. The cost: one micro-batch's rows (its expert inputs, SwiGLU outputs and the
// two output gradients, ~350 MB per layer on a seed rank) are held from its backward until the next one's.
// ops::grouped_linear_backward_weight_pair sums both in one GEMM per matrix: quill's CUDA kernel reads the two
// in place; the CPU, cuBLASLt and FP8 merge them into one expert order first (ops::gather_rows_from_pair), one
// matrix's rows at a time.
//
// Numerics: the same products, summed in another order (each expert's gradient gets the fp32 sum of both
// micro-batches' rows from the GEMM, then one addition into the gradient), so the option is a numerics one:
// it agrees with the one-GEMM-per-micro-batch path to fp32 rounding, and every layout with it agrees with one
// rank with it (tests/cli/expert_wgrad_pairs_test.cc).
#pragma once

#include <cstdint>

#include "model/expert_wgrad_turn.h"
#include "model/params.h"
#include "ops/device_context.h"

namespace quill {

// One MoE layer's routed rows of a micro-batch, in the local experts' order (host I64 counts [El]):
// dy2 [R, D] (W2's output gradient), a [R, F] (W2's input), dh13 [R, 2F] (W13's output gradient), x [R, D]
// (W13's input).
struct ExpertRows {
  Tensor dy2_RD, a_RF, dh13_R2F, x_RD, counts_L;
  bool empty() const { return !counts_L.defined(); }
};

// The layer's held rows between a Hold and the next WriteWithHeld.
class HeldExpertRows {
 public:
  // Hold: keeps `rows` (references, no copy). Fails if rows are already held (a turn was skipped).
  void hold(const ExpertRows& rows);
  // WriteWithHeld: W2's and W13's gradients over the held rows and `rows` together, one sum per expert (expert
  // e: the held micro-batch's rows, then this one's), by the parameters' write rule; the held rows released.
  // Fails if nothing is held.
  void write_with(const DeviceContext& ctx, const ExpertRows& rows, const Param& w2, const Param& w13);
  bool holding() const { return !held_.empty(); }
  // Write: checks that nothing is held (rows held and never written would be a lost gradient).
  void expect_none(int64_t layer) const;

 private:
  ExpertRows held_;
};

// W2's and W13's gradients from `rows` (the grouped weight-gradient GEMMs, by the parameters' write rule).
void write_expert_weight_grads(const DeviceContext& ctx, const ExpertRows& rows, const Param& w2, const Param& w13);

}  // namespace quill
