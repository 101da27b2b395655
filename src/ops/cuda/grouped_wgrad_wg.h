// The routed experts' weight gradient as one Hopper kernel (grouped_wgrad_wg.cu), behind
// CudaBackendOptions::grouped_wgrad_kernel: dw[e] (+)= dy[rows of e]^T . x[rows of e] for every expert e in one
// launch. Why: at a seed rank's ~384 rows per expert, cuBLASLt's GEMM that adds into the fp32 gradient (beta 1)
// runs at ~185 TFLOP/s on an H200 against ~290 writing it (beta 0): reading and writing the [M, N] fp32 block
// around a 384-deep product is the cost, and cuBLASLt's epilogue does it with the tensor cores idle. This kernel
// loads each tile's old gradient by TMA while the tile's product runs, adds in registers and stores the tile by
// TMA while the next product runs (grouped_wgrad_wg.cu). Each element gets one addition per call, so the result
// is fl(dw + sum) as cuBLASLt's beta-1 epilogue computes it, and the same bits every run (the sum's own order is
// the kernel's fixed one).
#pragma once

#include <cstdint>
#include <string>

#include "ops/device_context.h"
#include "ops/grouped_gemm_kernel.h"
#include "ops/kernel_trials.h"

namespace quill::cuda::grouped_wgrad {

// The kernel's tile: 128 rows of dw (two warpgroups of 64) by 256 columns, 64 rows of the contraction per stage,
// three 48 KiB operand stages beside a staging of half a tile (64 KiB). Measured against the forms it replaced (H100,
// bench/results/2026-12-07-h100-wgrad-split-staging/, 32 experts, gate/up accumulating): 384 rows 1.722 ms (128-wide
// tiles with five stages and a whole staging 1.741, 256-wide with two stages 1.767, cuBLASLt 2.307); 768 rows 2.387
// (2.836, 2.732, cuBLASLt 2.734); the earlier forms' history: docs/decisions/grouped-wgrad.md.
constexpr int64_t kTileM = 128, kTileN = 256, kTileRows = 64;

// The kernel's form, a typed choice of backward_weight; the op runs CudaBackendOptions::grouped_wgrad_form
// (--grouped-wgrad-form, default half). The ping-pong form's first version deadlocked on its first GPU run (2026-12-07,
// H100: docs/decisions/grouped-wgrad.md) and its fix has not run on a GPU yet:
// - kHalf: the kernel as chosen (above);
// - kQuarter (not yet measured): the tile staged in four 64-column quarters through 32 KiB, so four operand stages
//   fit, at the cost of three old-gradient loads per tile left outside the product instead of one;
// - kPingpong (not yet measured; grouped_wgrad_pingpong.cu): 128 x 128 tiles, each consumer warpgroup a whole tile
//   of its own (two m64n128k16 per step), alternate tiles to the two, a producer warpgroup loading five 32 KiB operand
//   stages and a 32 KiB half-tile staging per warpgroup: one warpgroup's epilogue (the old gradient's loads, the adds,
//   the stores) runs while the other's product keeps the tensor cores busy.
// Every form makes the same one addition per element of the same sum (the stages in row order, wgmma's k16 steps),
// so each is meant to give kHalf's bits; the tests check it.
using Form = GroupedWgradForm;  // --grouped-wgrad-form (ops/kernel_trials.h), the op's choice per run
constexpr int64_t kPingpongTileN = 128;  // kPingpong's tile: kTileM rows by this many columns
constexpr int64_t kMaxExperts = 256;  // Inkling-Small's 256 experts at EP1; the two offset tables fit 4 KiB of parameters

// --grouped-wgrad-kernel auto, measured (grouped_bench; the H100 figures above and bench/results/2026-12-06-h100-seed-ops/):
// accumulating, the kernel beats cuBLASLt at a seed rank's 384 and 768 rows per expert; writing (a step's first
// micro-batch) cuBLASLt is as fast at 384 rows and faster at 768 (1.603 against 2.008 ms gate/up); at the slice's
// ~1,536 rows cuBLASLt won against the earlier forms both ways (not measured against this one). So auto takes the
// kernel when accumulating up to kAutoMeanRows rows per expert on average; over two sources (two micro-batches'
// rows, which cuBLASLt needs merged first: a pass over both) up to kAutoMeanRowsTwoSources.
constexpr int64_t kAutoMeanRows = 512;
constexpr int64_t kAutoMeanRowsTwoSources = 1024;
// Whether a weight gradient of P rows over E experts runs on the kernel under `choice` (the shape checks come after).
inline bool by_wgmma(GroupedGemmKernel choice, bool accumulate, int64_t P, int64_t E, bool two_sources = false) {
  if (choice != GroupedGemmKernel::kAuto) return choice == GroupedGemmKernel::kWgmma;
  return accumulate && P <= (two_sources ? kAutoMeanRowsTwoSources : kAutoMeanRows) * E;
}

// Why the kernel cannot take a call ("" when it can): not an sm_90 device, a width not a multiple of its tile,
// too many experts, or an operand not 16-byte aligned (TMA).
std::string unsupported_reason(int64_t E, int64_t M, int64_t N, const void* dy, const void* x);

// A second source of rows (another micro-batch's: --moe-expert-wgrad-micro-batches 2): dy [P, M], x [P, N] bf16,
// expert e's rows at its counts' offsets (counts on the host, E of them).
struct Rows {
  const void* dy;
  const void* x;
  const int64_t* counts;
  int64_t P;
};

// dw_EMN [E, M, N] fp32 (+)= per expert e: dy_PM[rows e]^T . x_PN[rows e], rows e = [off_e, off_e + counts[e]),
// dy_PM [P, M] and x_PN [P, N] bf16, counts on the host; with `second`, expert e's rows there after its own in the
// same sum (one product per element over both: the merged rows' GEMM without the merge). accumulate false: dw[e]
// written (zero when e has no row).
void backward_weight(const DeviceContext& ctx, const void* dy_PM, const void* x_PN, const int64_t* counts, int64_t E,
                     int64_t P, int64_t M, int64_t N, float* dw_EMN, bool accumulate, const Rows* second = nullptr,
                     Form form = Form::kHalf);

}  // namespace quill::cuda::grouped_wgrad
