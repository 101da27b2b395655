// The routed experts' forward and input-gradient GEMMs as one persistent Hopper kernel (grouped_gemm_wg.cu),
// instead of one cuBLASLt GEMM per expert: y[rows of e] = a[rows of e] . B_e for every expert e in one launch.
//
// Why: a seed rank holds 32 experts of ~384 rows each per micro-batch. One expert's GEMM has a 384 x 4,096 output,
// 48 tiles of 128 x 256 for 132 multiprocessors, so cuBLASLt's per-expert calls leave SMs idle and end each call
// with a partial wave (55-61% of the bf16 ceiling in the seed's profiles, against 75-95% for the dense GEMMs of the
// same width). One launch over the tiles of every expert keeps every SM busy until the op's last wave
// (docs/decisions/grouped-gemm-wgmma.md). Chosen by CudaBackendOptions::grouped_gemm_kernel (--grouped-gemm-kernel;
// auto: by_wgmma below); shapes the kernel does not take go to cuBLASLt.
//
//   forward:        y_PN[rows of e] = a_PC[rows of e] . w_ENC[e]^T   (grouped_linear_forward: a = x, w [E, M, K])
//   backward_input: y_PN[rows of e] = a_PC[rows of e] . w_ECN[e]     (grouped_linear_backward_input: a = dy,
//                                                                     w [E, M, K] with C = M, N = K)
// bf16 operands and output, fp32 accumulation in the kernel's fixed order (the same bits every run).
#pragma once

#include <cstdint>
#include <string>

#include "ops/cuda/fp8_quantize.h"
#include "ops/device_context.h"
#include "ops/grouped_gemm_kernel.h"

namespace quill::cuda::grouped_gemm {

constexpr int64_t kMaxExperts = 256;  // the kernel's parameter block holds two [E + 1] offset tables
constexpr int64_t kTileRows = 128;    // rows of a, two consumer warpgroups of 64
constexpr int64_t kTileCols = 256;    // output columns (wgmma n256)
constexpr int64_t kTileK = 64;        // contraction per pipeline stage (one 128-byte swizzled box)

// --grouped-gemm-kernel auto, measured (bench/results/2026-12-06-h100-grouped-gemm-wgmma/, grouped_bench on an H100):
// bf16 at a seed rank's 384 rows per expert the kernel took 0.60 / 0.33 / 0.31 / 0.60 ms for the four ops against
// cuBLASLt's 0.79 / 0.48 / 0.49 / 0.78; at the slice's ~1,536 rows cuBLASLt's were shorter (2.34 / 1.31 / 1.26 /
// 2.35 against 2.53 / 1.43 / 1.33 / 2.77). FP8 the kernel was shorter at both sizes. So auto takes the kernel for
// FP8, and for bf16 up to kAutoMeanRows rows per expert (between the two measured sizes, not measured itself).
constexpr int64_t kAutoMeanRows = 1024;
// Whether a grouped GEMM of P rows over E experts runs on the kernel under `choice` (the shape checks come after).
inline bool by_wgmma(GroupedGemmKernel choice, bool fp8, int64_t P, int64_t E) {
  if (choice != GroupedGemmKernel::kAuto) return choice == GroupedGemmKernel::kWgmma;
  return fp8 || P <= kAutoMeanRows * E;
}

// The grid of a persistent launch over `tiles` tiles: one CTA per multiprocessor, fewer for fewer tiles.
unsigned persistent_ctas(int64_t tiles);

// Why the kernel cannot run this problem here ("" if it can): not an sm_90 device, N not a multiple of
// kTileCols, C not a multiple of kTileK, more than kMaxExperts experts, an operand not 16-byte aligned.
std::string unsupported_reason(int64_t E, int64_t N, int64_t C, const void* a, const void* w, const void* y);

void forward(const DeviceContext& ctx, const void* a_PC, const void* w_ENC, const int64_t* counts, int64_t E,
             int64_t P, int64_t N, int64_t C, void* y_PN);
void backward_input(const DeviceContext& ctx, const void* a_PC, const void* w_ECN, const int64_t* counts, int64_t E,
                    int64_t P, int64_t N, int64_t C, void* y_PN);

// FP8 (E4M3, blockwise scaling; ops/fp8.h), grouped_gemm_fp8_wg.cu: y_PN[rows of group g] = Q_rows(a)[rows of g] .
// Q_blocks(w[g])^T for every group g = expert in one launch, instead of one cuBLASLt block-scaled GEMM per expert.
// a: the activation quantised by fp8q::quantize_rows into the padded row space of `groups` (codes [Np, C], the
// rows128 factors); w: codes [E, N, C] (the forward's w codes, or the input gradient's codes_t) with their 128 x 128
// blocks' factors [E, N/128, roundup(C/128, 4)]; y: bf16 [source rows, N], written at each group's source rows. Each
// 128-wide slice of the contraction is multiplied on the tensor cores into a fresh fp32 product and added to the
// fp32 accumulator times its row's and block's factors (the promotion of DeepSeek's blockwise recipe).
constexpr int64_t kFp8TileCols = 128;  // output columns per tile (one weight block)
constexpr int64_t kFp8TileK = 128;     // contraction per stage (one scale block)
std::string fp8_unsupported_reason(int64_t E, int64_t N, int64_t C, const void* a_codes, const void* w_codes,
                                   const void* y);
void fp8_forward(const DeviceContext& ctx, const uint8_t* a_codes, const float* a_scale, const fp8q::RowGroups& groups,
                 const uint8_t* w_codes, const float* w_scale, int64_t N, int64_t C, void* y);

}  // namespace quill::cuda::grouped_gemm
