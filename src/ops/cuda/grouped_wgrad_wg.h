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

namespace quill::cuda::grouped_wgrad {

// The kernel's tile: 128 rows of dw (two warpgroups of 64) by tile_n(form) columns, 64 rows of the contraction per
// stage. Two forms of one template, each the faster in its range (measured on an H100,
// bench/results/2026-12-06-h100-seed-ops/, 32 experts, ms gate/up and down):
//   kN128  128 x 128 tiles, five 32 KiB operand stages beside a 64 KiB staging: accumulating at 384 rows per expert
//          1.748 / 0.884 (kN256 1.893 / 0.949, cuBLASLt 2.310 / 1.243);
//   kN256  128 x 256 tiles, two 48 KiB operand stages beside a 128 KiB staging: accumulating at 768 rows 2.739 /
//          1.389 (kN128 2.956 / 1.409, cuBLASLt 2.744 / 1.473), and every first write (384 rows 1.410 against 1.524).
//   kN256Split (experiment, until measured against kN256: called directly by grouped_bench and the tests, never
//          chosen by form_for) kN256's tiles with a staging of half a tile (64 KiB): the first 128 columns' old
//          gradient loads under the product as before, the second's after the first half's store has read the
//          staging, so three 48 KiB operand stages fit instead of two. The same one addition per element as kN256
//          in the same sum, so the same bits.
enum class Form { kN256, kN128, kN256Split };
constexpr int64_t kTileM = 128, kTileRows = 64;
constexpr int64_t tile_n(Form form) { return form == Form::kN128 ? 128 : 256; }
constexpr Form kDefaultForm = Form::kN256;
constexpr int64_t kTileN = tile_n(kDefaultForm);
constexpr int64_t kMaxExperts = 256;  // Inkling-Small's 256 experts at EP1; the two offset tables fit 4 KiB of parameters

// The form for a call of P rows over E experts: the 128-wide one when accumulating up to kForm128MeanRows rows per
// expert on average (between the measured 384 and 768), else the 256-wide one.
constexpr int64_t kForm128MeanRows = 512;
inline Form form_for(bool accumulate, int64_t P, int64_t E) {
  return accumulate && P <= kForm128MeanRows * E ? Form::kN128 : Form::kN256;
}

// --grouped-wgrad-kernel auto, measured (bench/results/2026-12-06-h100-grouped-wgrad-staged/ and
// 2026-12-06-h100-seed-ops/, grouped_bench on an H100): accumulating, the kernel beats cuBLASLt at a seed rank's 384
// rows per expert (above) and ties it at 768; writing (a step's first micro-batch) cuBLASLt is faster (1.18 against
// 1.41 ms gate/up at 384 rows), and at the slice's ~1,536 rows both ways. So auto takes the kernel when accumulating
// up to kAutoMeanRows rows per expert on average; over two sources (two micro-batches' rows, which cuBLASLt needs
// merged first: a pass over both) up to kAutoMeanRowsTwoSources, where the tie at 768 leaves the merge saved.
constexpr int64_t kAutoMeanRows = 512;
constexpr int64_t kAutoMeanRowsTwoSources = 1024;
// Whether a weight gradient of P rows over E experts runs on the kernel under `choice` (the shape checks come after).
inline bool by_wgmma(GroupedGemmKernel choice, bool accumulate, int64_t P, int64_t E, bool two_sources = false) {
  if (choice != GroupedGemmKernel::kAuto) return choice == GroupedGemmKernel::kWgmma;
  return accumulate && P <= (two_sources ? kAutoMeanRowsTwoSources : kAutoMeanRows) * E;
}

// Why the kernel cannot take a call ("" when it can): not an sm_90 device, a width not a multiple of its tile,
// too many experts, or an operand not 16-byte aligned (TMA).
std::string unsupported_reason(int64_t E, int64_t M, int64_t N, const void* dy, const void* x,
                               Form form = kDefaultForm);

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
                     int64_t P, int64_t M, int64_t N, float* dw_EMN, bool accumulate, Form form = kDefaultForm,
                     const Rows* second = nullptr);

}  // namespace quill::cuda::grouped_wgrad
