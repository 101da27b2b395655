// FP8 blockwise-scaled tensors and the GEMMs that read them (--fp8-format e4m3 --fp8-recipe blockwise;
// docs/fp8.md, docs/decisions/fp8-blockwise.md).
//
// A quantised tensor is E4M3 codes (ops/fp8_e4m3.h) of the source's shape and one fp32 dequantisation
// factor (scale_inv, a power of two) per tile: element v is stored as code(v * scale) and read back as
// e4m3_to_float(code) * scale_inv, scale = fp8::block_scale(amax of its tile). The tilings:
//   kRows128    1x128 tiles of every row: elements [128j, 128j + 128) of a row share a scale; the
//               operand of a GEMM contracting over the columns (the forward's x, the data gradient's dy).
//               scale_inv [R, ceil(C/128)].
//   kColumns128 128x1 tiles of every column, i.e. the 1x128 tiles of the transpose: the operands of the
//               weight-gradient GEMM, which contracts over the rows (tokens). scale_inv [ceil(R/128), C];
//               grouped (per expert): tiles restart at each group's first row, scale_inv
//               [sum over groups of ceil(rows/128), C], the groups' tile rows one after another.
//   kBlocks128  128x128 blocks (weights), of each matrix of a stack [E, M, K]: scale_inv
//               [E, ceil(M/128), ceil(K/128)] (or [ceil(M/128), ceil(K/128)] for one matrix).
// A dimension that is not a multiple of 128 ends in a partial tile whose amax covers only its elements.
//
// On the CUDA backend the layouts are the ones cuBLASLt's block-scaled FP8 GEMMs read (Hopper's FP8
// tensor cores take both operands K-major), and only weights (kBlocks128) cross this interface: the
// activation and gradient tiles are quantised inside the GEMM ops (ops/cuda/fp8_quantize.h). A CUDA
// kBlocks128 tensor holds the codes [.., M, K], their transpose codes_t [.., K, M] (the data gradient's
// operand), scale_inv [.., ceil(M/128), roundup(ceil(K/128), 4)] and scale_inv_t [.., ceil(K/128),
// roundup(ceil(M/128), 4)] (each block's factor twice; rows padded to 4 floats as cuBLASLt's
// CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F layout wants, the padding never read). fp8_scale_shape
// gives these shapes for Device::CUDA. Every dimension of a CUDA FP8 GEMM must be a multiple of 16
// (cuBLASLt's FP8 leading-dimension rule); the row counts (tokens, an expert's rows) may be anything.
//
// The GEMMs (same shapes and accumulate rules as ops/linear.h and ops/moe.h): the weight is quantised
// once per optimizer step by the caller (fp8_quantize with kBlocks128); the activation and gradient
// operands are quantised inside each op, 1x128 along the GEMM's contraction:
//   forward            y  = Q_rows(x) . Q_blocks(w)^T
//   backward input     dx = Q_rows(dy) . Q_blocks(w)        (a 128x128 block is its transpose's block)
//   backward weight    dw = Q_cols(dy)^T . Q_cols(x)        (contracts over the N tokens)
// with fp32 accumulation and the outputs in the activation dtype. The CPU reference computes the same
// quantised values and scales as the GPU, then multiplies the dequantised operands in fp32: the products
// of two E4M3 values and power-of-two scales are exact in fp32, so only the order of the fp32 sums differs.
// CPU tensors are F32.
#pragma once

#include "ops/device_context.h"

namespace quill::ops {

enum class Fp8Tiling { kRows128, kColumns128, kBlocks128 };
const char* fp8_tiling_name(Fp8Tiling tiling);

struct Fp8Tensor {
  Tensor codes;      // U8, the source's shape
  Tensor scale_inv;  // F32, one per tile (shapes above)
  Fp8Tiling tiling = Fp8Tiling::kRows128;
  // The CUDA backend's transposed codes of a weight ([..., K, M]) and their factors, for the
  // data-gradient GEMM's operand that Hopper's FP8 tensor cores need K-major; undefined on the CPU,
  // which reads `codes` either way.
  Tensor codes_t;
  Tensor scale_inv_t;
  bool defined() const { return codes.defined(); }
};

// The scale_inv shape of `shape` under a tiling (groups: the row counts of a grouped kColumns128); on
// Device::CUDA (kBlocks128 only) the padded layout above, and `transposed` gives scale_inv_t's.
Shape fp8_scale_shape(const Shape& shape, Fp8Tiling tiling, Device device = Device::CPU, bool transposed = false);
// Bytes of a weight's quantised copy on `device` (codes, and on CUDA codes_t, and the factors).
int64_t fp8_weight_copy_bytes(const Shape& shape, Device device);
Shape fp8_grouped_scale_shape(const Shape& shape, const Tensor& counts_E);
// Buffers for the quantisation of a tensor of `shape` on ctx's device.
Fp8Tensor fp8_empty(const DeviceContext& ctx, const Shape& shape, Fp8Tiling tiling);
// Matrix e of a quantised kBlocks128 stack [E, M, K], as its own [M, K] quantised tensor (views).
Fp8Tensor fp8_matrix(const Fp8Tensor& stack, int64_t e);

// out = the quantisation of x (2-D; kBlocks128 also 3-D stacks). out's buffers are allocated by the caller
// (fp8_empty) with the tiling it names. CPU: x F32. CUDA: kBlocks128, x BF16 or F32.
void fp8_quantize(const DeviceContext& ctx, const Tensor& x, const Fp8Tensor& out);
// kColumns128 with the tiles restarting at each group's first row (counts_E I64 on the host).
void fp8_quantize_grouped(const DeviceContext& ctx, const Tensor& x_PK, const Tensor& counts_E, const Fp8Tensor& out);
// out = codes * scale_inv, element by element (counts_E: only for a grouped kColumns128; else undefined).
// CUDA: kBlocks128, out F32 or BF16 (exact either way), read from codes and from codes_t into an out of
// the transposed shape (`from_transpose`), so that a test sees both copies.
void fp8_dequantize(const DeviceContext& ctx, const Fp8Tensor& q, const Tensor& counts_E, const Tensor& out,
                    bool from_transpose = false);

void fp8_linear_forward(const DeviceContext& ctx, const Tensor& x_NK, const Fp8Tensor& w_MK, const Tensor& y_NM);
void fp8_linear_backward_input(const DeviceContext& ctx, const Tensor& dy_NM, const Fp8Tensor& w_MK,
                               const Tensor& dx_NK, bool accumulate = false);
void fp8_linear_backward_weight(const DeviceContext& ctx, const Tensor& dy_NM, const Tensor& x_NK, const Tensor& dw_MK,
                                bool accumulate = true);

void fp8_grouped_linear_forward(const DeviceContext& ctx, const Tensor& x_PK, const Fp8Tensor& w_EMK,
                                const Tensor& counts_E, const Tensor& y_PM);
void fp8_grouped_linear_backward_input(const DeviceContext& ctx, const Tensor& dy_PM, const Fp8Tensor& w_EMK,
                                       const Tensor& counts_E, const Tensor& dx_PK);
void fp8_grouped_linear_backward_weight(const DeviceContext& ctx, const Tensor& dy_PM, const Tensor& x_PK,
                                        const Tensor& counts_E, const Tensor& dw_EMK, bool accumulate = true);

}  // namespace quill::ops
