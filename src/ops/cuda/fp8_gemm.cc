// The FP8 ops of ops/fp8.h on the CUDA backend: the weight's quantised copy (fp8_quantize, kBlocks128),
// its way back (fp8_dequantize, for tests), and the six GEMMs as cuBLASLt block-scaled FP8 matmuls
// (E4M3 A and B, fp32 accumulation, the output in its dtype) with
//   CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F     the activation or gradient operand, 1x128 along the contraction
//   CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F the weight
// (cuBLAS 12.9+ on Hopper; Transformer Engine's Float8BlockScaling GEMMs are the same calls). The
// activation and gradient operands are quantised by each op into the padded row layouts of
// fp8_quantize.h, one GEMM per group (the dense ops are one group, the grouped ops one per expert);
// an output whose rows need no padding is written in place, else through padded rows copied back.
// Row-major to column-major as in gemm.cu: a row-major [R, C] matrix is the column-major [C, R] one.
//   forward          y^T (M x n)  = (w codes as K x M)^T   (x codes as K x n)          both K-major
//   backward input   dx^T (K x n) = (w codes_t as M x K)^T (dy codes as M x n)         both M-major
//   backward weight  dw^T (K x M) = (x^T codes as k x K)^T (dy^T codes as k x M)       both token-major
// Every weight dimension must be a multiple of 16 (the FP8 leading-dimension rule); the row counts are free.
#include "ops/cuda/fp8_quantize.h"
#include "ops/cuda/grouped_gemm_wg.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/lt_matmul.h"
#include "ops/dispatch.h"
#include "ops/fp8.h"

#include "ops/cuda/cuda_resources.h"
#include "ops/cuda/tensor_checks.h"

namespace quill::cuda {
namespace {

using fp8q::RowGroups;
using ops::Fp8Tensor;
using ops::Fp8Tiling;
using ops_detail::require_dtype;
using ops_detail::require_shape;

constexpr int64_t kB = 128;
int64_t blocks(int64_t n) { return (n + kB - 1) / kB; }
int64_t pad4(int64_t n) { return (n + 3) / 4 * 4; }
cudaDataType_t lt_type(DType d) { return d == DType::BF16 ? CUDA_R_16BF : CUDA_R_32F; }

void require_float(const char* op, const char* name, const Tensor& t) {
  QUILL_CHECK(t.dtype() == DType::BF16 || t.dtype() == DType::F32, "{}: {} has dtype {}, expected BF16 or F32", op,
              name, dtype_name(t.dtype()));
}
void require_16(const char* op, const char* what, int64_t v) {
  QUILL_CHECK(v % 16 == 0, "{}: {} is {}; the FP8 GEMMs need it a multiple of 16 (cuBLASLt's FP8 leading-dimension "
              "rule)", op, what, v);
}

// A quantised weight as the GEMMs read it: matrix e's codes, transposed codes and factors.
struct Weight {
  const uint8_t* codes;
  const uint8_t* codes_t;
  const float* scale;
  const float* scale_t;
  int64_t E, M, K;
  const uint8_t* codes_of(int64_t e) const { return codes + e * M * K; }
  const uint8_t* codes_t_of(int64_t e) const { return codes_t + e * M * K; }
  const float* scale_of(int64_t e) const { return scale + e * blocks(M) * pad4(blocks(K)); }
  const float* scale_t_of(int64_t e) const { return scale_t + e * blocks(K) * pad4(blocks(M)); }
};

Weight check_weight(const char* op, const Fp8Tensor& w, int64_t ndim) {
  QUILL_CHECK(w.defined() && w.tiling == Fp8Tiling::kBlocks128 && w.codes.ndim() == ndim && w.codes_t.defined() &&
                  w.scale_inv_t.defined(),
              "{}: the weight must be a {}-D quantised tensor of 128x128 blocks with its transpose (fp8_quantize on CUDA)",
              op, ndim);
  const Shape& s = w.codes.shape();
  Weight out{w.codes.data_as<uint8_t>(), w.codes_t.data_as<uint8_t>(), w.scale_inv.data_as<float>(),
             w.scale_inv_t.data_as<float>(), ndim == 3 ? s[0] : 1, s[ndim - 2], s[ndim - 1]};
  require_cuda(op, "the weight's codes", w.codes);
  Shape t = s;
  std::swap(t[t.size() - 1], t[t.size() - 2]);
  require_shape(op, "the weight's codes_t", w.codes_t, t);
  require_shape(op, "the weight's scale_inv", w.scale_inv, ops::fp8_scale_shape(s, Fp8Tiling::kBlocks128, Device::CUDA));
  require_shape(op, "the weight's scale_inv_t", w.scale_inv_t,
                ops::fp8_scale_shape(s, Fp8Tiling::kBlocks128, Device::CUDA, true));
  require_16(op, "the weight's rows (M)", out.M);
  require_16(op, "the weight's columns (K)", out.K);
  return out;
}

Tensor scratch(const DeviceContext& ctx, int64_t n, DType dtype) {
  return Tensor::empty({std::max<int64_t>(n, 1)}, dtype, *ctx.allocator);
}

// An activation or gradient operand quantised 1x128 along its columns (rows128) or, transposed, along
// its rows (columns128), in the padded row space of `g`.
struct Quantised {
  Tensor codes, scale;
};
Quantised rows128(const DeviceContext& ctx, const Tensor& x, const RowGroups& g) {
  const int64_t C = x.dim(1);
  Quantised q{scratch(ctx, g.padded_total() * C, DType::U8), scratch(ctx, g.padded_total() * blocks(C), DType::F32)};
  fp8q::quantize_rows(ctx, x.data(), x.dtype(), C, g, q.codes.data_as<uint8_t>(), q.scale.data_as<float>());
  return q;
}
Quantised columns128(const DeviceContext& ctx, const Tensor& x, const RowGroups& g) {
  const int64_t C = x.dim(1);
  Quantised q{scratch(ctx, g.padded_total() * C, DType::U8), scratch(ctx, g.tile[g.count] * pad4(C), DType::F32)};
  fp8q::quantize_columns_transposed(ctx, x.data(), x.dtype(), C, g, q.codes.data_as<uint8_t>(),
                                    q.scale.data_as<float>());
  return q;
}

// Where the GEMMs of a row-wise op write: `out` itself when no group needs padding, else padded rows
// (fp32 when accumulating, so that the sum is rounded once as cuBLASLt's beta = 1 would) copied back by
// finish().
class RowOutput {
 public:
  RowOutput(const DeviceContext& ctx, const Tensor& out, const RowGroups& g, bool accumulate)
      : ctx_(ctx), out_(out), g_(g), accumulate_(accumulate), C_(out.dim(1)) {
    if (g.padded()) {
      pad_dtype_ = accumulate ? DType::F32 : out.dtype();
      pad_ = scratch(ctx, g.padded_total() * C_, pad_dtype_);
    }
  }
  void* rows_of(int grp) const {
    if (!pad_.defined()) return static_cast<char*>(out_.data()) + g_.src[grp] * C_ * dtype_size(out_.dtype());
    return static_cast<char*>(pad_.data()) + g_.dst[grp] * C_ * dtype_size(pad_dtype_);
  }
  cudaDataType_t type() const { return lt_type(pad_.defined() ? pad_dtype_ : out_.dtype()); }
  float beta() const { return !pad_.defined() && accumulate_ ? 1.0f : 0.0f; }
  void finish() const {
    if (pad_.defined()) fp8q::unpad_rows(ctx_, pad_.data(), pad_dtype_, C_, g_, out_.data(), out_.dtype(), accumulate_);
  }

 private:
  const DeviceContext& ctx_;
  Tensor out_;
  const RowGroups& g_;
  bool accumulate_;
  int64_t C_;
  DType pad_dtype_ = DType::F32;
  Tensor pad_;
};

constexpr cudaDataType_t kE4M3 = CUDA_R_8F_E4M3;
constexpr auto kVec = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
constexpr auto kBlk = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;

// The row-wise GEMMs: out rows of group g (= or +=) act rows . op(w[e]), e = g for a grouped op, 0 for a
// dense one. The forward contracts over K with the weight's codes (y = x w^T); the data gradient over M with
// its transposed codes (dx = dy w).
enum class RowGemm { kForward, kBackwardInput };
void rowwise(const DeviceContext& ctx, const char* op, RowGemm which, const Tensor& act, const Weight& w,
             bool grouped, const RowGroups& g, const Tensor& out_rows, bool accumulate) {
  const bool fwd = which == RowGemm::kForward;
  const int64_t k = fwd ? w.K : w.M, m = fwd ? w.M : w.K;  // contraction, output width
  const Quantised q = rows128(ctx, act, g);
  const RowOutput out(ctx, out_rows, g, accumulate);
  for (int grp = 0; grp < g.count; ++grp) {
    const int64_t n = g.padded_rows(grp), e = grouped ? grp : 0;
    if (n == 0) continue;
    matmul(ctx, op, CUBLAS_OP_T,
           Operand{fwd ? w.codes_of(e) : w.codes_t_of(e), kE4M3, uint64_t(k), uint64_t(m), k,
                   fwd ? w.scale_of(e) : w.scale_t_of(e), kBlk},
           CUBLAS_OP_N,
           Operand{q.codes.data_as<uint8_t>() + g.dst[grp] * k, kE4M3, uint64_t(k), uint64_t(n), k,
                   q.scale.data_as<float>() + blocks(k) * g.dst[grp], kVec},
           out.rows_of(grp), out.type(), uint64_t(m), uint64_t(n), uint64_t(k), out.beta(), Vary::kN);
  }
  out.finish();
}

// dw[e] (F32, = or +=) dy^T x over group g's rows.
void backward_weight(const DeviceContext& ctx, const char* op, const Tensor& dy, const Tensor& x, const RowGroups& g,
                     const Tensor& dw, int64_t M, int64_t K, bool accumulate) {
  const Quantised qx = columns128(ctx, x, g), qdy = columns128(ctx, dy, g);
  const int64_t Np = g.padded_total();
  for (int grp = 0; grp < g.count; ++grp) {
    const int64_t k = g.padded_rows(grp);
    if (k == 0 && accumulate) continue;  // (an empty sum with beta 0 zeroes dw[e]: matmul's k == 0 case)
    matmul(ctx, op, CUBLAS_OP_T,
           Operand{qx.codes.data_as<uint8_t>() + g.dst[grp], kE4M3, uint64_t(k), uint64_t(K), Np,
                   qx.scale.data_as<float>() + g.tile[grp] * pad4(K), kVec},
           CUBLAS_OP_N,
           Operand{qdy.codes.data_as<uint8_t>() + g.dst[grp], kE4M3, uint64_t(k), uint64_t(M), Np,
                   qdy.scale.data_as<float>() + g.tile[grp] * pad4(M), kVec},
           dw.data_as<float>() + grp * M * K, CUDA_R_32F, uint64_t(K), uint64_t(M), uint64_t(k),
           accumulate ? 1.0f : 0.0f, Vary::kK);
  }
}

void check_activation(const char* op, const char* name, const char* dims, const Tensor& t) {
  require_2d(op, name, dims, t);
  require_cuda(op, name, t);
  require_float(op, name, t);
}


// A row-wise op's activation [rows, in] and output [rows, width] (BF16 or F32 on the device); returns rows.
int64_t check_rows(const char* op, const char* act_name, const Tensor& act, int64_t in, const char* out_name,
                   const Tensor& out, int64_t width) {
  check_activation(op, act_name, "[rows, features]", act);
  const int64_t rows = act.dim(0);
  require_shape(op, act_name, act, {rows, in});
  require_shape(op, out_name, out, {rows, width});
  require_cuda(op, out_name, out);
  require_float(op, out_name, out);
  return rows;
}

// A weight gradient's operands dy [rows, M] and x [rows, K], and dw (F32, its dimensions multiples of 16).
void check_weight_gradient(const char* op, const Tensor& dy, const Tensor& x, const Tensor& dw, const Shape& dw_shape) {
  check_activation(op, "dy", "[rows, M]", dy);
  check_activation(op, "x", "[rows, K]", x);
  const int64_t M = dw_shape[dw_shape.size() - 2], K = dw_shape.back();
  require_shape(op, "dy", dy, {dy.dim(0), M});
  require_shape(op, "x", x, {dy.dim(0), K});
  require_shape(op, "dw", dw, dw_shape);
  require_dtype(op, "dw", dw, DType::F32);
  require_cuda(op, "dw", dw);
  require_16(op, "dw's rows (M)", M);
  require_16(op, "dw's columns (K)", K);
}

// The row-wise GEMMs (written, not accumulated) by quill's FP8 kernel, one launch for every group, where the shape
// takes it (a bf16 output, widths on its 128 x 128 blocks: grouped_gemm_wg.h); false (nothing done) where not.
bool rowwise_by_kernel(const DeviceContext& ctx, RowGemm which, const Tensor& act, const Weight& w, int64_t groups,
                       const RowGroups& g, const Tensor& out) {
  const bool fwd = which == RowGemm::kForward;
  const int64_t k = fwd ? w.K : w.M, m = fwd ? w.M : w.K;  // contraction, output width
  const uint8_t* w_codes = fwd ? w.codes : w.codes_t;
  if (out.dtype() != DType::BF16 ||
      !grouped_gemm::fp8_unsupported_reason(groups, m, k, nullptr, w_codes, out.data()).empty())
    return false;
  const Quantised q = rows128(ctx, act, g);
  grouped_gemm::fp8_forward(ctx, q.codes.data_as<uint8_t>(), q.scale.data_as<float>(), g, w_codes,
                            fwd ? w.scale : w.scale_t, m, k, out.data());
  return true;
}

// A dense row-wise op written (not accumulated): quill's kernel as one group when CudaBackendOptions::
// grouped_gemm_kernel is wgmma (--grouped-gemm-kernel wgmma: the FP8 row-wise GEMMs, dense ones too; auto leaves the
// dense ones to cuBLASLt until measured), else cuBLASLt.
void dense_rowwise(const DeviceContext& ctx, const char* op, RowGemm which, const Tensor& act, const Weight& w,
                   int64_t rows, const Tensor& out, bool accumulate) {
  const RowGroups g = fp8q::single_group(op, rows);
  if (!accumulate && ctx.cuda->grouped_gemm_kernel == GroupedGemmKernel::kWgmma &&
      rowwise_by_kernel(ctx, which, act, w, 1, g, out))
    return;
  rowwise(ctx, op, which, act, w, false, g, out, accumulate);
}

// A grouped row-wise op: checks (the activation [P, in], the output [P, out], the counts), then the GEMMs.
void grouped_rowwise(const DeviceContext& ctx, const char* op, RowGemm which, const Tensor& act, const Fp8Tensor& w_EMK,
                     const Tensor& counts_E, const Tensor& out) {
  const Weight w = check_weight(op, w_EMK, 3);
  const bool fwd = which == RowGemm::kForward;
  const int64_t P = fwd ? check_rows(op, "x_PK", act, w.K, "y_PM", out, w.M)
                        : check_rows(op, "dy_PM", act, w.M, "dx_PK", out, w.K);
  const int64_t* counts = ops_detail::require_group_counts(op, counts_E, P, w.E);
  const RowGroups g = fp8q::groups_of(op, counts, w.E);
  // CudaBackendOptions::grouped_gemm_kernel: one launch for every expert where the choice and the shape take the
  // kernel, else one cuBLASLt GEMM per expert.
  if (grouped_gemm::by_wgmma(ctx.cuda->grouped_gemm_kernel, true, P, w.E) &&
      rowwise_by_kernel(ctx, which, act, w, w.E, g, out))
    return;
  rowwise(ctx, op, which, act, w, true, g, out, false);
}

}  // namespace

void fp8_quantize(const DeviceContext& ctx, const Tensor& x, const Fp8Tensor& out) {
  const char* op = "fp8_quantize";
  QUILL_CHECK(out.tiling == Fp8Tiling::kBlocks128, "{}: on CUDA only weights (128x128 blocks) are quantised outside "
              "the GEMMs, not {} tiles", op, ops::fp8_tiling_name(out.tiling));
  QUILL_CHECK(x.defined() && (x.ndim() == 2 || x.ndim() == 3), "{}: x must be a 2-D matrix or a 3-D stack, got {}", op,
              x.defined() ? x.describe() : std::string("(undefined)"));
  require_cuda(op, "x", x);
  require_float(op, "x", x);
  require_shape(op, "codes", out.codes, x.shape());
  require_dtype(op, "codes", out.codes, DType::U8);
  const int64_t n = x.ndim();
  const int64_t E = n == 3 ? x.dim(0) : 1, M = x.dim(n - 2), K = x.dim(n - 1);
  Shape t = x.shape();
  std::swap(t[t.size() - 1], t[t.size() - 2]);
  require_shape(op, "codes_t", out.codes_t, t);
  require_shape(op, "scale_inv", out.scale_inv, ops::fp8_scale_shape(x.shape(), Fp8Tiling::kBlocks128, Device::CUDA));
  require_shape(op, "scale_inv_t", out.scale_inv_t,
                ops::fp8_scale_shape(x.shape(), Fp8Tiling::kBlocks128, Device::CUDA, true));
  fp8q::quantize_blocks(ctx, x.data(), x.dtype(), E, M, K, out.codes.data_as<uint8_t>(), out.codes_t.data_as<uint8_t>(),
                        out.scale_inv.data_as<float>(), out.scale_inv_t.data_as<float>());
}

void fp8_dequantize(const DeviceContext& ctx, const Fp8Tensor& q, const Tensor& counts_E, const Tensor& out,
                    bool from_transpose) {
  const char* op = "fp8_dequantize";
  QUILL_CHECK(!counts_E.defined() && q.tiling == Fp8Tiling::kBlocks128 && q.codes_t.defined(),
              "{}: on CUDA only a weight's 128x128 blocks (fp8_quantize), without group counts", op);
  const Tensor& codes = from_transpose ? q.codes_t : q.codes;
  const Tensor& scale = from_transpose ? q.scale_inv_t : q.scale_inv;
  require_cuda(op, "out", out);
  require_float(op, "out", out);
  require_shape(op, "out", out, codes.shape());
  const int64_t n = codes.ndim();
  fp8q::dequantize_blocks(ctx, codes.data_as<uint8_t>(), scale.data_as<float>(), scale.dim(n - 1),
                          n == 3 ? codes.dim(0) : 1, codes.dim(n - 2), codes.dim(n - 1), out.data(), out.dtype());
}

void fp8_linear_forward(const DeviceContext& ctx, const Tensor& x_NK, const Fp8Tensor& w_MK, const Tensor& y_NM) {
  const char* op = "fp8_linear_forward";
  const Weight w = check_weight(op, w_MK, 2);
  const int64_t N = check_rows(op, "x", x_NK, w.K, "y", y_NM, w.M);
  dense_rowwise(ctx, op, RowGemm::kForward, x_NK, w, N, y_NM, false);
}

void fp8_linear_backward_input(const DeviceContext& ctx, const Tensor& dy_NM, const Fp8Tensor& w_MK,
                               const Tensor& dx_NK, bool accumulate) {
  const char* op = "fp8_linear_backward_input";
  const Weight w = check_weight(op, w_MK, 2);
  const int64_t N = check_rows(op, "dy", dy_NM, w.M, "dx", dx_NK, w.K);
  dense_rowwise(ctx, op, RowGemm::kBackwardInput, dy_NM, w, N, dx_NK, accumulate);
}

void fp8_linear_backward_weight(const DeviceContext& ctx, const Tensor& dy_NM, const Tensor& x_NK, const Tensor& dw_MK,
                                bool accumulate) {
  const char* op = "fp8_linear_backward_weight";
  QUILL_CHECK(dw_MK.defined() && dw_MK.ndim() == 2, "{}: dw must be 2-D [M, K]", op);
  check_weight_gradient(op, dy_NM, x_NK, dw_MK, dw_MK.shape());
  backward_weight(ctx, op, dy_NM, x_NK, fp8q::single_group(op, dy_NM.dim(0)), dw_MK, dw_MK.dim(0), dw_MK.dim(1),
                  accumulate);
}

void fp8_grouped_linear_forward(const DeviceContext& ctx, const Tensor& x_PK, const Fp8Tensor& w_EMK,
                                const Tensor& counts_E, const Tensor& y_PM) {
  grouped_rowwise(ctx, "fp8_grouped_linear_forward", RowGemm::kForward, x_PK, w_EMK, counts_E, y_PM);
}

void fp8_grouped_linear_backward_input(const DeviceContext& ctx, const Tensor& dy_PM, const Fp8Tensor& w_EMK,
                                       const Tensor& counts_E, const Tensor& dx_PK) {
  grouped_rowwise(ctx, "fp8_grouped_linear_backward_input", RowGemm::kBackwardInput, dy_PM, w_EMK, counts_E, dx_PK);
}

void fp8_grouped_linear_backward_weight(const DeviceContext& ctx, const Tensor& dy_PM, const Tensor& x_PK,
                                        const Tensor& counts_E, const Tensor& dw_EMK, bool accumulate) {
  const char* op = "fp8_grouped_linear_backward_weight";
  QUILL_CHECK(dw_EMK.defined() && dw_EMK.ndim() == 3, "{}: dw_EMK must be 3-D [E, M, K]", op);
  check_weight_gradient(op, dy_PM, x_PK, dw_EMK, dw_EMK.shape());
  const int64_t E = dw_EMK.dim(0);
  const int64_t* counts = ops_detail::require_group_counts(op, counts_E, dy_PM.dim(0), E);
  backward_weight(ctx, op, dy_PM, x_PK, fp8q::groups_of(op, counts, E), dw_EMK, dw_EMK.dim(1), dw_EMK.dim(2),
                  accumulate);
}

}  // namespace quill::cuda
