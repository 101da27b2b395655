// Dense and grouped linear layers on cuBLASLt (ops/linear.h, the grouped_linear_* ops of ops/moe.h).
//
// Math (row-major, as torch's nn.Linear without bias):
//   linear_forward:         y[n, m]  = sum_k x[n, k] * w[m, k]                 (y overwritten)
//   linear_backward_input:  dx[n, k] = sum_m dy[n, m] * w[m, k]                (overwritten, or added when accumulate)
//   linear_backward_weight: dw[m, k] += sum_n dy[n, m] * x[n, k]               (accumulated, or overwritten)
//   grouped_linear_*:       the same per expert e on rows [off_e, off_e + counts[e]) of x/y/dy/dx with
//                           w[e] / dw[e], off_e the prefix sum of counts. An expert with no rows writes
//                           nothing, and its dw[e] is left untouched when accumulating, zeroed otherwise.
// Legend: N (P) rows, K input features, M output features, E experts.
// Dtypes (docs/decisions/cuda-precision.md): x, w, dy all BF16 (fp32 accumulation, CUBLAS_COMPUTE_32F)
// or all F32 (the router: CUBLAS_COMPUTE_32F, which excludes TF32, so the product is plain fp32);
// y and dx are the input dtype or F32 (a bf16 product written in fp32); dw is always F32 and is
// accumulated with beta = 1 (bf16 A/B with fp32 C = D is a supported cuBLASLt combination), or written
// with beta = 0 by a step's first write (docs/decisions/gradient-first-write.md).
// Outputs are rounded once, from fp32, to their dtype. counts_E is I64 in host memory.
// Row-major to column-major: a row-major [R, C] matrix is the column-major [C, R] matrix (its
// transpose) with leading dimension C, so y = x w^T is computed as y^T = w x^T, and so on below.
// Preconditions: contiguous tensors on the context's device; outputs do not alias inputs; any pointer
// alignment (each call is one cuBLASLt matmul of lt_matmul.h).
#include "ops/cuda/cuda_resources.h"
#include "ops/cuda/grouped_gemm_wg.h"
#include "ops/cuda/grouped_wgrad_wg.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/lt_matmul.h"
#include "ops/cuda/tensor_checks.h"
#include "ops/dispatch.h"
#include "ops/moe.h"

#include <cstdint>
#include <string>
#include <utility>

namespace quill::cuda {
namespace {

using ops_detail::require_dtype;
using ops_detail::require_shape;

cudaDataType_t cuda_type(DType d) { return d == DType::BF16 ? CUDA_R_16BF : CUDA_R_32F; }

// Row-major GEMMs on raw pointers (sizes already validated). `xt` is the dtype of x, w and dy.

// y[N, M] (= beta * y) + x[N, K] w[M, K]^T:  y^T (M x N) = (w^T as K x M)^T (x^T as K x N).
void gemm_forward(const DeviceContext& ctx, const char* op, DType xt, DType yt, const void* x, const void* w, void* y,
                  int64_t N, int64_t K, int64_t M) {
  const cudaDataType_t t = cuda_type(xt);
  matmul(ctx, op, CUBLAS_OP_T, Operand{w, t, uint64_t(K), uint64_t(M), K}, CUBLAS_OP_N,
         Operand{x, t, uint64_t(K), uint64_t(N), K}, y, cuda_type(yt), uint64_t(M), uint64_t(N), uint64_t(K), 0.0f,
         Vary::kN);
}

// dx[N, K] = beta * dx + dy[N, M] w[M, K]:  dx^T (K x N) = (w^T as K x M) (dy^T as M x N).
void gemm_backward_input(const DeviceContext& ctx, const char* op, DType xt, DType dxt, const void* dy,
                         const void* w, void* dx, int64_t N, int64_t K, int64_t M, bool accumulate) {
  const cudaDataType_t t = cuda_type(xt);
  matmul(ctx, op, CUBLAS_OP_N, Operand{w, t, uint64_t(K), uint64_t(M), K}, CUBLAS_OP_N,
         Operand{dy, t, uint64_t(M), uint64_t(N), M}, dx, cuda_type(dxt), uint64_t(K), uint64_t(N), uint64_t(M),
         accumulate ? 1.0f : 0.0f, Vary::kN);
}

// dw[M, K] (F32) = beta * dw + dy[N, M]^T x[N, K]:  dw^T (K x M) = beta * dw^T + (x^T as K x N) (dy^T as M x N)^T.
void gemm_backward_weight(const DeviceContext& ctx, const char* op, DType xt, const void* dy, const void* x, void* dw,
                          int64_t N, int64_t K, int64_t M, bool accumulate, Candidate* candidate = nullptr) {
  const cudaDataType_t t = cuda_type(xt);
  matmul(ctx, op, CUBLAS_OP_N, Operand{x, t, uint64_t(K), uint64_t(N), K}, CUBLAS_OP_T,
         Operand{dy, t, uint64_t(M), uint64_t(N), M}, dw, CUDA_R_32F, uint64_t(K), uint64_t(M), uint64_t(N),
         accumulate ? 1.0f : 0.0f, Vary::kK, candidate);
}

// ---------------------------------------------------------------------------------------------
// Validation, in the words of the CPU ops.

// The operand dtype: BF16 or F32.
void require_operand_dtype(const char* op, const char* name, const Tensor& t) {
  QUILL_CHECK(t.dtype() == DType::BF16 || t.dtype() == DType::F32, "{}: {} has dtype {}, expected BF16 or F32", op,
              name, dtype_name(t.dtype()));
}

// An output written from the fp32 accumulators: the operand dtype, or F32.
void require_output_dtype(const char* op, const char* name, const Tensor& t, DType operand) {
  QUILL_CHECK(t.dtype() == operand || t.dtype() == DType::F32, "{}: {} has dtype {}, expected {} or F32", op, name,
              dtype_name(t.dtype()), dtype_name(operand));
}

const char* byte_ptr(const Tensor& t) { return static_cast<const char*>(t.data()); }
char* byte_ptr_mut(const Tensor& t) { return static_cast<char*>(t.data()); }


void require_3d(const char* op, const char* name, const Tensor& t) {
  QUILL_CHECK(t.defined() && t.ndim() == 3, "{}: {} must be 3-D [E, M, K], got {}", op, name,
              t.defined() ? t.describe() : std::string("(undefined)"));
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Dense linear.

void linear_forward(const DeviceContext& ctx, const Tensor& x_NK, const Tensor& w_MK, const Tensor& y_NM) {
  const char* op = "linear_forward";
  require_2d(op, "x", "[N, K]", x_NK);
  require_2d(op, "w", "[M, K]", w_MK);
  const int64_t N = x_NK.dim(0), K = x_NK.dim(1), M = w_MK.dim(0);
  require_shape(op, "w", w_MK, {M, K});
  require_shape(op, "y", y_NM, {N, M});
  require_operand_dtype(op, "x", x_NK);
  require_dtype(op, "w", w_MK, x_NK.dtype());
  require_output_dtype(op, "y", y_NM, x_NK.dtype());
  require_cuda(op, "x", x_NK);
  require_cuda(op, "w", w_MK);
  require_cuda(op, "y", y_NM);
  gemm_forward(ctx, op, x_NK.dtype(), y_NM.dtype(), x_NK.data(), w_MK.data(), y_NM.data(), N, K, M);
}

void linear_backward_input(const DeviceContext& ctx, const Tensor& dy_NM, const Tensor& w_MK, const Tensor& dx_NK,
                           bool accumulate) {
  const char* op = "linear_backward_input";
  require_2d(op, "dy", "[N, M]", dy_NM);
  require_2d(op, "w", "[M, K]", w_MK);
  const int64_t N = dy_NM.dim(0), M = dy_NM.dim(1), K = w_MK.dim(1);
  require_shape(op, "w", w_MK, {M, K});
  require_shape(op, "dx", dx_NK, {N, K});
  require_operand_dtype(op, "dy", dy_NM);
  require_dtype(op, "w", w_MK, dy_NM.dtype());
  require_output_dtype(op, "dx", dx_NK, dy_NM.dtype());
  require_cuda(op, "dy", dy_NM);
  require_cuda(op, "w", w_MK);
  require_cuda(op, "dx", dx_NK);
  gemm_backward_input(ctx, op, dy_NM.dtype(), dx_NK.dtype(), dy_NM.data(), w_MK.data(), dx_NK.data(), N, K, M,
                      accumulate);
}

namespace {
void check_backward_weight(const char* op, const Tensor& dy_NM, const Tensor& x_NK, const Tensor& dw_MK) {
  require_2d(op, "dy", "[N, M]", dy_NM);
  require_2d(op, "x", "[N, K]", x_NK);
  const int64_t N = dy_NM.dim(0), M = dy_NM.dim(1), K = x_NK.dim(1);
  require_shape(op, "x", x_NK, {N, K});
  require_shape(op, "dw", dw_MK, {M, K});
  require_operand_dtype(op, "dy", dy_NM);
  require_dtype(op, "x", x_NK, dy_NM.dtype());
  require_dtype(op, "dw", dw_MK, DType::F32);
  require_cuda(op, "dy", dy_NM);
  require_cuda(op, "x", x_NK);
  require_cuda(op, "dw", dw_MK);
}
}  // namespace

void linear_backward_weight(const DeviceContext& ctx, const Tensor& dy_NM, const Tensor& x_NK, const Tensor& dw_MK,
                            bool accumulate) {
  check_backward_weight("linear_backward_weight", dy_NM, x_NK, dw_MK);
  gemm_backward_weight(ctx, "linear_backward_weight", dy_NM.dtype(), dy_NM.data(), x_NK.data(), dw_MK.data(),
                       dy_NM.dim(0), x_NK.dim(1), dy_NM.dim(1), accumulate);
}

bool linear_backward_weight_candidate(const DeviceContext& ctx, const Tensor& dy_NM, const Tensor& x_NK,
                                      const Tensor& dw_MK, bool accumulate, int index, std::string* config) {
  check_backward_weight("linear_backward_weight_candidate", dy_NM, x_NK, dw_MK);
  Candidate c;
  c.index = index;
  gemm_backward_weight(ctx, "linear_backward_weight_candidate", dy_NM.dtype(), dy_NM.data(), x_NK.data(), dw_MK.data(),
                       dy_NM.dim(0), x_NK.dim(1), dy_NM.dim(1), accumulate, &c);
  if (config) *config = c.config;
  return c.found;
}

// ---------------------------------------------------------------------------------------------
// Grouped linear: one cuBLASLt GEMM per expert with rows (the per-expert counts are on the host).

void grouped_linear_forward(const DeviceContext& ctx, const Tensor& x_PK, const Tensor& w_EMK, const Tensor& counts_E,
                            const Tensor& y_PM) {
  const char* op = "grouped_linear_forward";
  require_3d(op, "w_EMK", w_EMK);
  require_2d(op, "x_PK", "[P, K]", x_PK);
  const int64_t P = x_PK.dim(0), E = w_EMK.dim(0), M = w_EMK.dim(1), K = w_EMK.dim(2);
  require_shape(op, "x_PK", x_PK, {P, K});
  require_shape(op, "y_PM", y_PM, {P, M});
  const int64_t* counts = ops_detail::require_group_counts(op, counts_E, P, E);
  require_operand_dtype(op, "x_PK", x_PK);
  require_dtype(op, "w_EMK", w_EMK, x_PK.dtype());
  require_output_dtype(op, "y_PM", y_PM, x_PK.dtype());
  require_cuda(op, "x_PK", x_PK);
  require_cuda(op, "w_EMK", w_EMK);
  require_cuda(op, "y_PM", y_PM);
  // CudaBackendOptions::grouped_gemm_kernel: one launch for every expert where the choice and the shape take the
  // kernel (bf16 in and out, widths on its tile: grouped_gemm_wg.h), else one cuBLASLt GEMM per expert as below.
  if (grouped_gemm::by_wgmma(ctx.cuda->grouped_gemm_kernel, false, P, E) && x_PK.dtype() == DType::BF16 &&
      y_PM.dtype() == DType::BF16 &&
      grouped_gemm::unsupported_reason(E, M, K, x_PK.data(), w_EMK.data(), y_PM.data()).empty()) {
    grouped_gemm::forward(ctx, x_PK.data(), w_EMK.data(), counts, E, P, M, K, byte_ptr_mut(y_PM));
    return;
  }
  const size_t xs = dtype_size(x_PK.dtype()), ys = dtype_size(y_PM.dtype());
  for (int64_t e = 0, row = 0; e < E; row += counts[e], ++e) {
    if (counts[e] == 0) continue;
    gemm_forward(ctx, op, x_PK.dtype(), y_PM.dtype(), byte_ptr(x_PK) + row * K * xs, byte_ptr(w_EMK) + e * M * K * xs,
                 byte_ptr_mut(y_PM) + row * M * ys, counts[e], K, M);
  }
}

void grouped_linear_backward_input(const DeviceContext& ctx, const Tensor& dy_PM, const Tensor& w_EMK,
                                   const Tensor& counts_E, const Tensor& dx_PK) {
  const char* op = "grouped_linear_backward_input";
  require_3d(op, "w_EMK", w_EMK);
  require_2d(op, "dy_PM", "[P, M]", dy_PM);
  const int64_t P = dy_PM.dim(0), E = w_EMK.dim(0), M = w_EMK.dim(1), K = w_EMK.dim(2);
  require_shape(op, "dy_PM", dy_PM, {P, M});
  require_shape(op, "dx_PK", dx_PK, {P, K});
  const int64_t* counts = ops_detail::require_group_counts(op, counts_E, P, E);
  require_operand_dtype(op, "dy_PM", dy_PM);
  require_dtype(op, "w_EMK", w_EMK, dy_PM.dtype());
  require_output_dtype(op, "dx_PK", dx_PK, dy_PM.dtype());
  require_cuda(op, "dy_PM", dy_PM);
  require_cuda(op, "w_EMK", w_EMK);
  require_cuda(op, "dx_PK", dx_PK);
  // CudaBackendOptions::grouped_gemm_kernel, as in the forward: dx [P, K] = dy [P, M] . w[e] [M, K].
  if (grouped_gemm::by_wgmma(ctx.cuda->grouped_gemm_kernel, false, P, E) && dy_PM.dtype() == DType::BF16 &&
      dx_PK.dtype() == DType::BF16 &&
      grouped_gemm::unsupported_reason(E, K, M, dy_PM.data(), w_EMK.data(), dx_PK.data()).empty()) {
    grouped_gemm::backward_input(ctx, dy_PM.data(), w_EMK.data(), counts, E, P, K, M, byte_ptr_mut(dx_PK));
    return;
  }
  const size_t xs = dtype_size(dy_PM.dtype()), dxs = dtype_size(dx_PK.dtype());
  for (int64_t e = 0, row = 0; e < E; row += counts[e], ++e) {
    if (counts[e] == 0) continue;
    gemm_backward_input(ctx, op, dy_PM.dtype(), dx_PK.dtype(), byte_ptr(dy_PM) + row * M * xs,
                        byte_ptr(w_EMK) + e * M * K * xs, byte_ptr_mut(dx_PK) + row * K * dxs, counts[e], K, M,
                        /*accumulate=*/false);
  }
}

void grouped_linear_backward_weight(const DeviceContext& ctx, const Tensor& dy_PM, const Tensor& x_PK,
                                    const Tensor& counts_E, const Tensor& dw_EMK, bool accumulate) {
  const char* op = "grouped_linear_backward_weight";
  require_3d(op, "dw_EMK", dw_EMK);
  require_2d(op, "dy_PM", "[P, M]", dy_PM);
  const int64_t P = dy_PM.dim(0), E = dw_EMK.dim(0), M = dw_EMK.dim(1), K = dw_EMK.dim(2);
  require_shape(op, "dy_PM", dy_PM, {P, M});
  require_shape(op, "x_PK", x_PK, {P, K});
  const int64_t* counts = ops_detail::require_group_counts(op, counts_E, P, E);
  require_operand_dtype(op, "dy_PM", dy_PM);
  require_dtype(op, "x_PK", x_PK, dy_PM.dtype());
  require_dtype(op, "dw_EMK", dw_EMK, DType::F32);
  require_cuda(op, "dy_PM", dy_PM);
  require_cuda(op, "x_PK", x_PK);
  require_cuda(op, "dw_EMK", dw_EMK);
  // CudaBackendOptions::grouped_wgrad_kernel: one launch for every expert where the choice (auto: by the shape, as
  // measured) and the kernel take it (bf16, dw's width a multiple of its tile: grouped_wgrad_wg.h), else cuBLASLt.
  if (grouped_wgrad::by_wgmma(ctx.cuda->grouped_wgrad_kernel, accumulate, P, E) && dy_PM.dtype() == DType::BF16 &&
      grouped_wgrad::unsupported_reason(E, M, K, dy_PM.data(), x_PK.data()).empty()) {
    grouped_wgrad::backward_weight(ctx, dy_PM.data(), x_PK.data(), counts, E, P, M, K, dw_EMK.data_as<float>(),
                                   accumulate, nullptr, ctx.cuda->grouped_wgrad_form);
    return;
  }
  const size_t xs = dtype_size(dy_PM.dtype());
  for (int64_t e = 0, row = 0; e < E; row += counts[e], ++e) {
    if (counts[e] == 0 && accumulate) continue;  // (an empty sum with beta 0 zeroes dw[e]: matmul's k == 0 case)
    gemm_backward_weight(ctx, op, dy_PM.dtype(), byte_ptr(dy_PM) + row * M * xs, byte_ptr(x_PK) + row * K * xs,
                         byte_ptr_mut(dw_EMK) + e * M * K * sizeof(float), counts[e], K, M, accumulate);
  }
}

void grouped_linear_backward_weight_pair(const DeviceContext& ctx, const Tensor& dy_a_PM, const Tensor& x_a_PK,
                                         const Tensor& counts_a_E, const Tensor& dy_b_PM, const Tensor& x_b_PK,
                                         const Tensor& counts_b_E, const Tensor& dw_EMK, bool accumulate) {
  const char* op = "grouped_linear_backward_weight_pair";
  require_3d(op, "dw_EMK", dw_EMK);
  require_2d(op, "dy_a_PM", "[P, M]", dy_a_PM);
  require_2d(op, "dy_b_PM", "[P, M]", dy_b_PM);
  const int64_t Pa = dy_a_PM.dim(0), Pb = dy_b_PM.dim(0), E = dw_EMK.dim(0), M = dw_EMK.dim(1), K = dw_EMK.dim(2);
  require_shape(op, "dy_a_PM", dy_a_PM, {Pa, M});
  require_shape(op, "x_a_PK", x_a_PK, {Pa, K});
  require_shape(op, "dy_b_PM", dy_b_PM, {Pb, M});
  require_shape(op, "x_b_PK", x_b_PK, {Pb, K});
  const int64_t* counts_a = ops_detail::require_group_counts(op, counts_a_E, Pa, E);
  const int64_t* counts_b = ops_detail::require_group_counts(op, counts_b_E, Pb, E);
  for (const auto& [name, t] : {std::pair{"x_a_PK", &x_a_PK}, std::pair{"dy_b_PM", &dy_b_PM}, std::pair{"x_b_PK", &x_b_PK}})
    require_dtype(op, name, *t, dy_a_PM.dtype());
  require_dtype(op, "dw_EMK", dw_EMK, DType::F32);
  // Both sources in place by the kernel where the one-source op would take the merged rows there (the same choice,
  // on the merged row count), else the rows merged and the one-source op.
  const grouped_wgrad::Rows second{dy_b_PM.data(), x_b_PK.data(), counts_b, Pb};
  if (grouped_wgrad::by_wgmma(ctx.cuda->grouped_wgrad_kernel, accumulate, Pa + Pb, E, /*two_sources=*/true) &&
      dy_a_PM.dtype() == DType::BF16 &&
      grouped_wgrad::unsupported_reason(E, M, K, dy_a_PM.data(), x_a_PK.data()).empty() &&
      grouped_wgrad::unsupported_reason(E, M, K, second.dy, second.x).empty()) {
    for (const auto& [name, t] : {std::pair{"dy_a_PM", &dy_a_PM}, std::pair{"x_a_PK", &x_a_PK},
                                  std::pair{"dy_b_PM", &dy_b_PM}, std::pair{"x_b_PK", &x_b_PK},
                                  std::pair{"dw_EMK", &dw_EMK}})
      require_cuda(op, name, *t);
    grouped_wgrad::backward_weight(ctx, dy_a_PM.data(), x_a_PK.data(), counts_a, E, Pa, M, K, dw_EMK.data_as<float>(),
                                   accumulate, &second, ctx.cuda->grouped_wgrad_form);
    return;
  }
  ops_detail::merged_backward_weight_pair(ctx, dy_a_PM, x_a_PK, counts_a_E, dy_b_PM, x_b_PK, counts_b_E, dw_EMK,
                                          accumulate);
}

}  // namespace quill::cuda
