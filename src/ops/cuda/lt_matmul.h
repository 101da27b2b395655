// One cuBLASLt matmul on column-major operands, shared by the bf16/fp32 GEMMs (gemm.cu) and the FP8
// GEMMs (fp8_gemm.cu): D (m x n, column-major, ld m) = op(A) op(B) + beta * D, with C = D.
// The algorithm comes from the context's plan cache (gemm_plan_cache.h: one heuristic query per shape,
// the dimension that follows a row count bucketed). An operand may carry a block-scale tensor
// (FP8: cuBLASLt's A/B_SCALE_MODE and A/B_SCALE_POINTER); the scale modes are part of the cache key.
// Any pointer alignment works: the heuristic query is told each operand's real alignment (cuBLASLt
// otherwise assumes 256 bytes), which matters for row views such as an expert's block of rows.
#pragma once

#include <cublasLt.h>

#include <cstdint>
#include <string>

#include "ops/device_context.h"

namespace quill::cuda {

// A column-major operand as cuBLASLt stores it (before the op is applied). `scale`, when set, is the
// device pointer of its dequantisation factors laid out as `scale_mode` requires (FP8 operands).
struct Operand {
  const void* ptr;
  cudaDataType_t type;
  uint64_t rows, cols;
  int64_t ld;
  const float* scale = nullptr;
  cublasLtMatmulMatrixScale_t scale_mode = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
};

// Which dimension of a call follows a row count (an expert's rows, a chunk of positions): the plan
// cache buckets it. At every call site it is a column count of the column-major operands it appears
// in, so a bucketed layout keeps its leading dimensions.
enum class Vary { kN, kK };

// What a measurement asks of matmul (grouped_bench): run the heuristic's algorithm number `index`
// (0 is the one quill uses) instead, bypassing the plan cache; `found` is false when the heuristic
// returns fewer, `config` describes the algorithm run.
struct Candidate {
  int index = 0;
  bool found = false;
  std::string config;
};

const char* cuda_type_name(cudaDataType_t t);
size_t cuda_type_size(cudaDataType_t t);

// D = op(A) op(B) + beta * D (fp32 accumulation, alpha 1). k == 0 is an empty sum (D = beta * D);
// m == 0 or n == 0 does nothing. Throws naming `op`, the shapes and cuBLASLt's reason when no
// algorithm takes the problem.
void matmul(const DeviceContext& ctx, const char* op, cublasOperation_t ta, const Operand& a, cublasOperation_t tb,
            const Operand& b, void* d, cudaDataType_t d_type, uint64_t m, uint64_t n, uint64_t k, float beta,
            Vary vary, Candidate* candidate = nullptr);

}  // namespace quill::cuda
