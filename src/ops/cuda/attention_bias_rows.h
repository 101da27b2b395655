// The attention's bias rows and their gradient, callable from host code (attention_tc_bias.cu; the kernels' callers
// use attn_tc::bias_rows and bias_rows_backward of attention_tc.h, the same functions on an attn::Problem).
//   rb_THE [T, H, E] fp32 = r_THR [T, H, R] (bf16 or fp32) . table_RE [R, E] (fp32)
//   dr_THR [T, H, R] (bf16 or fp32, overwritten) = drb_THE [T, H, E] (fp32) . table^T; dtable_RE += r^T . drb when
//   defined (a frozen table passes none).
// BiasRowsPath, a typed choice: kCublasLt (cuBLASLt's fp32 GEMMs, the default) or kKernels (memory-bound kernels for
// R <= 16, written 2026-12-07 and not yet run on a GPU); the ops take CudaBackendOptions::attention_bias_rows
// (--attention-bias-rows), attention_bench and CudaAttentionBiasRows.* call both directly.
#pragma once

#include <cstdint>

#include "ops/device_context.h"
#include "ops/kernel_trials.h"

namespace quill::cuda::attn_bias {

using BiasRowsPath = AttentionBiasRows;  // --attention-bias-rows (ops/kernel_trials.h)

void bias_rows(const DeviceContext& ctx, int64_t T, int64_t H, int64_t R, int64_t E, const Tensor& r_THR,
               const Tensor& table_RE, const Tensor& rb_THE, BiasRowsPath path);
void bias_rows_backward(const DeviceContext& ctx, int64_t T, int64_t H, int64_t R, int64_t E, const Tensor& r_THR,
                        const Tensor& table_RE, const Tensor& drb_THE, const Tensor& dr_THR, const Tensor& dtable_RE,
                        BiasRowsPath path);

}  // namespace quill::cuda::attn_bias
