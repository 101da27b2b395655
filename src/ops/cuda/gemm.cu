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
// Preconditions: contiguous tensors on the context's device; outputs do not alias inputs. Any
// pointer alignment works: the heuristic query is told each operand's real alignment (cuBLASLt
// otherwise assumes 256 bytes), which matters for row views such as an expert's block of rows.
// Descriptors are created per call; the algorithm comes from the context's plan cache
// (gemm_plan_cache.h: one heuristic query per shape, row counts bucketed).
#include "ops/cuda/cuda_resources.h"
#include "ops/cuda/gemm_plan_cache.h"
#include "ops/cuda/grouped_wgrad_wg.h"
#include "ops/cuda/kernels.h"
#include "ops/dispatch.h"

#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <vector>

// Checks a cuBLASLt call made through the table `lt` (cublaslt_library.h), naming the status
// through cuBLASLt's own cublasLtGetStatusString (cublasGetStatusString lives in libcublas).
#define QUILL_LT_CHECK(lt, call)                                                                             \
  do {                                                                                                       \
    cublasStatus_t st_ = (call);                                                                             \
    QUILL_CHECK(st_ == CUBLAS_STATUS_SUCCESS, "cuBLASLt call {} failed: {}", #call, (lt).cublasLtGetStatusString(st_)); \
  } while (0)

namespace quill::cuda {
namespace {

using ops_detail::require_dtype;
using ops_detail::require_shape;

// ---------------------------------------------------------------------------------------------
// cuBLASLt core: D (m x n, column-major, ld m) = op(A) op(B) + beta * D, with C = D.

// Each descriptor keeps the table it was created through, to destroy itself through it.
struct MatmulDesc {
  const CublasLt& lt;
  cublasLtMatmulDesc_t h = nullptr;
  ~MatmulDesc() { if (h) lt.cublasLtMatmulDescDestroy(h); }
};
struct Layout {
  const CublasLt& lt;
  cublasLtMatrixLayout_t h = nullptr;
  ~Layout() { if (h) lt.cublasLtMatrixLayoutDestroy(h); }
};
struct Preference {
  const CublasLt& lt;
  cublasLtMatmulPreference_t h = nullptr;
  ~Preference() { if (h) lt.cublasLtMatmulPreferenceDestroy(h); }
};

// A column-major operand as cuBLASLt stores it (before the op is applied).
struct Operand {
  const void* ptr;
  cudaDataType_t type;
  uint64_t rows, cols;
  int64_t ld;
};

cudaDataType_t cuda_type(DType d) { return d == DType::BF16 ? CUDA_R_16BF : CUDA_R_32F; }
size_t cuda_type_size(cudaDataType_t t) { return t == CUDA_R_16BF ? 2 : 4; }
const char* cuda_type_name(cudaDataType_t t) { return t == CUDA_R_16BF ? "bf16" : "f32"; }

// Largest power of two (up to 256) that divides the address.
uint32_t alignment_of(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && (a % al) != 0) al >>= 1;
  return al;
}

void make_layout(Layout& l, const Operand& o) {
  QUILL_LT_CHECK(l.lt, l.lt.cublasLtMatrixLayoutCreate(&l.h, o.type, o.rows, o.cols, o.ld));
}

// Which dimension of a call follows a row count (an expert's rows, a chunk of positions): the plan
// cache (gemm_plan_cache.h) buckets it. At every call site below it is a column count of the
// column-major operands it appears in, so a bucketed layout keeps its leading dimensions.
enum class Vary { kN, kK };

// What a measurement asks of matmul (grouped_bench): run the heuristic's algorithm number `index`
// (0 is the one quill uses) instead, bypassing the plan cache; `found` is false when the heuristic
// returns fewer, `config` describes the algorithm run.
struct Candidate {
  int index = 0;
  bool found = false;
  std::string config;
};

std::string describe_algo(const CublasLt& lt, const cublasLtMatmulAlgo_t& algo) {
  auto get = [&](cublasLtMatmulAlgoConfigAttributes_t attr) {
    uint32_t v = 0;  // every attribute read here is 32 bits or fewer, little-endian
    size_t written = 0;
    if (lt.cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &v, sizeof(v), &written) != CUBLAS_STATUS_SUCCESS) return -1L;
    return static_cast<long>(v);
  };
  return fmt::format("id {} tile {} stages {} split-k {} reduction {} swizzle {} cluster {} custom {}",
                     get(CUBLASLT_ALGO_CONFIG_ID), get(CUBLASLT_ALGO_CONFIG_TILE_ID), get(CUBLASLT_ALGO_CONFIG_STAGES_ID),
                     get(CUBLASLT_ALGO_CONFIG_SPLITK_NUM), get(CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME),
                     get(CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING), get(CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID),
                     get(CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION));
}

void matmul(const DeviceContext& ctx, const char* op, cublasOperation_t ta, const Operand& a, cublasOperation_t tb,
            const Operand& b, void* d, cudaDataType_t d_type, uint64_t m, uint64_t n, uint64_t k, float beta,
            Vary vary, Candidate* candidate = nullptr) {
  if (m == 0 || n == 0) return;
  if (k == 0) {  // an empty sum: D = beta * D
    if (beta == 0.0f)
      QUILL_CUDA_CHECK(cudaMemsetAsync(d, 0, m * n * cuda_type_size(d_type), stream_of(ctx)));
    return;
  }
  CudaResources& res = *ctx.cuda;
  const CublasLt& lt = res.cublaslt;
  MatmulDesc desc{lt};
  QUILL_LT_CHECK(lt, lt.cublasLtMatmulDescCreate(&desc.h, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const int32_t op_a = ta, op_b = tb;
  QUILL_LT_CHECK(lt, lt.cublasLtMatmulDescSetAttribute(desc.h, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
  QUILL_LT_CHECK(lt, lt.cublasLtMatmulDescSetAttribute(desc.h, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));

  Layout la{lt}, lb{lt}, ld{lt};
  make_layout(la, a);
  make_layout(lb, b);
  make_layout(ld, Operand{d, d_type, m, n, static_cast<int64_t>(m)});

  Preference pref{lt};
  QUILL_LT_CHECK(lt, lt.cublasLtMatmulPreferenceCreate(&pref.h));
  const uint64_t ws = res.workspace_bytes;
  QUILL_LT_CHECK(
      lt, lt.cublasLtMatmulPreferenceSetAttribute(pref.h, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  const uint32_t al_a = alignment_of(a.ptr), al_b = alignment_of(b.ptr), al_d = alignment_of(d);
  QUILL_LT_CHECK(
      lt, lt.cublasLtMatmulPreferenceSetAttribute(pref.h, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof(al_a)));
  QUILL_LT_CHECK(
      lt, lt.cublasLtMatmulPreferenceSetAttribute(pref.h, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof(al_b)));
  QUILL_LT_CHECK(
      lt, lt.cublasLtMatmulPreferenceSetAttribute(pref.h, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_d, sizeof(al_d)));
  QUILL_LT_CHECK(
      lt, lt.cublasLtMatmulPreferenceSetAttribute(pref.h, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof(al_d)));

  // The heuristic's first algorithm for the given layouts, or nullopt-like `false`.
  auto ask = [&](const Layout& qa, const Layout& qb, const Layout& qd, cublasLtMatmulAlgo_t& algo,
                 cublasStatus_t& why) {
    cublasLtMatmulHeuristicResult_t heur{};
    int found = 0;
    why = lt.cublasLtMatmulAlgoGetHeuristic(res.lt, desc.h, qa.h, qb.h, qd.h, qd.h, pref.h, 1, &heur, &found);
    if (why == CUBLAS_STATUS_SUCCESS && (found == 0 || heur.state != CUBLAS_STATUS_SUCCESS))
      why = found == 0 ? CUBLAS_STATUS_NOT_SUPPORTED : heur.state;
    if (why == CUBLAS_STATUS_SUCCESS) algo = heur.algo;
    return why == CUBLAS_STATUS_SUCCESS;
  };
  auto ask_exact = [&](cublasLtMatmulAlgo_t& algo) {
    cublasStatus_t why = CUBLAS_STATUS_SUCCESS;
    QUILL_CHECK(ask(la, lb, ld, algo, why),
                "{}: cuBLASLt has no algorithm for m={} n={} k={} (A {} {}x{} ld {} op {} align {}; B {} {}x{} ld {} "
                "op {} align {}; D {} ld {} align {}): {}",
                op, m, n, k, cuda_type_name(a.type), a.rows, a.cols, a.ld, ta == CUBLAS_OP_T ? "T" : "N", al_a,
                cuda_type_name(b.type), b.rows, b.cols, b.ld, tb == CUBLAS_OP_T ? "T" : "N", al_b,
                cuda_type_name(d_type), m, al_d, lt.cublasLtGetStatusString(why));
  };

  cublasLtMatmulAlgo_t algo{};
  bool from_cache = false;
  // Bucketing needs the varying dimension to be a column count of the operands it appears in.
  const bool can_bucket = vary == Vary::kN ? (tb == CUBLAS_OP_N && b.cols == n) : (a.cols == k && b.cols == k &&
                                                                                  ta == CUBLAS_OP_N && tb == CUBLAS_OP_T);
  if (candidate) {
    std::vector<cublasLtMatmulHeuristicResult_t> heur(static_cast<size_t>(candidate->index) + 1);
    int found = 0;
    const cublasStatus_t why = lt.cublasLtMatmulAlgoGetHeuristic(res.lt, desc.h, la.h, lb.h, ld.h, ld.h, pref.h,
                                                                 candidate->index + 1, heur.data(), &found);
    candidate->found = why == CUBLAS_STATUS_SUCCESS && found > candidate->index &&
                       heur[static_cast<size_t>(candidate->index)].state == CUBLAS_STATUS_SUCCESS;
    if (!candidate->found) return;
    algo = heur[static_cast<size_t>(candidate->index)].algo;
    candidate->config = describe_algo(lt, algo);
  } else if (GemmPlanCache::enabled() && can_bucket) {
    if (!res.gemm_plans) res.gemm_plans = std::make_shared<GemmPlanCache>();
    GemmPlanCache& cache = *res.gemm_plans;
    const uint64_t nb = vary == Vary::kN ? GemmPlanCache::bucket(n) : n;
    const uint64_t kb = vary == Vary::kK ? GemmPlanCache::bucket(k) : k;
    const GemmPlanKey key{static_cast<int32_t>(ta), static_cast<int32_t>(tb), static_cast<int32_t>(a.type),
                          static_cast<int32_t>(b.type), static_cast<int32_t>(d_type), m, nb, kb, a.ld, b.ld,
                          al_a, al_b, al_d, beta != 0.0f};
    auto it = cache.algos.find(key);
    if (it != cache.algos.end()) {
      algo = it->second;
      from_cache = true;
      ++cache.hits;
    } else {
      Operand ab = a, bb = b;
      if (vary == Vary::kN) {
        bb.cols = nb;
      } else {
        ab.cols = kb;
        bb.cols = kb;
      }
      Layout qa{lt}, qb{lt}, qd{lt};
      make_layout(qa, ab);
      make_layout(qb, bb);
      make_layout(qd, Operand{d, d_type, m, nb, static_cast<int64_t>(m)});
      cublasStatus_t why = CUBLAS_STATUS_SUCCESS;
      if (ask(qa, qb, qd, algo, why)) {
        cache.algos.emplace(key, algo);
        from_cache = true;
        ++cache.misses;
      } else {
        ask_exact(algo);
      }
    }
  } else {
    ask_exact(algo);
  }

  const float alpha = 1.0f;
  auto run = [&] {
    return lt.cublasLtMatmul(res.lt, desc.h, &alpha, a.ptr, la.h, b.ptr, lb.h, &beta, d, ld.h, d, ld.h, &algo,
                          res.workspace, res.workspace_bytes, stream_of(ctx));
  };
  cublasStatus_t st = run();
  if (st != CUBLAS_STATUS_SUCCESS && from_cache) {
    // The bucket's algorithm refused this exact problem: ask for this shape (not cached) and retry.
    ++res.gemm_plans->fallbacks;
    ask_exact(algo);
    st = run();
  }
  QUILL_CHECK(st == CUBLAS_STATUS_SUCCESS, "{}: cublasLtMatmul failed for m={} n={} k={}: {}", op, m, n, k,
              lt.cublasLtGetStatusString(st));
}

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

void require_cuda(const char* op, const char* name, const Tensor& t) {
  QUILL_CHECK(t.defined() && t.device() == Device::CUDA, "{}: {} must be a CUDA tensor, got {}", op, name,
              t.defined() ? t.describe() : std::string("(undefined)"));
}

void require_2d(const char* op, const char* name, const char* dims, const Tensor& t) {
  QUILL_CHECK(t.defined() && t.ndim() == 2, "{}: {} must be 2-D {}, got {}", op, name, dims,
              t.defined() ? t.describe() : std::string("(undefined)"));
}

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

// counts_E: I64 [E] in host memory, non-negative, summing to `rows`.
const int64_t* check_counts(const char* op, const Tensor& counts_E, int64_t E, int64_t rows) {
  require_shape(op, "counts_E", counts_E, {E});
  require_dtype(op, "counts_E", counts_E, DType::I64);
  QUILL_CHECK(counts_E.device() == Device::CPU, "{}: counts_E must be in host memory, got {}", op,
              counts_E.describe());
  const int64_t* counts = counts_E.data_as<int64_t>();
  int64_t total = 0;
  for (int64_t e = 0; e < E; ++e) {
    QUILL_CHECK(counts[e] >= 0, "{}: counts_E[{}] is {}, expected >= 0", op, e, counts[e]);
    total += counts[e];
  }
  QUILL_CHECK(total == rows, "{}: counts_E sums to {}, but there are {} rows", op, total, rows);
  return counts;
}

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
  const int64_t* counts = check_counts(op, counts_E, E, P);
  require_operand_dtype(op, "x_PK", x_PK);
  require_dtype(op, "w_EMK", w_EMK, x_PK.dtype());
  require_output_dtype(op, "y_PM", y_PM, x_PK.dtype());
  require_cuda(op, "x_PK", x_PK);
  require_cuda(op, "w_EMK", w_EMK);
  require_cuda(op, "y_PM", y_PM);
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
  const int64_t* counts = check_counts(op, counts_E, E, P);
  require_operand_dtype(op, "dy_PM", dy_PM);
  require_dtype(op, "w_EMK", w_EMK, dy_PM.dtype());
  require_output_dtype(op, "dx_PK", dx_PK, dy_PM.dtype());
  require_cuda(op, "dy_PM", dy_PM);
  require_cuda(op, "w_EMK", w_EMK);
  require_cuda(op, "dx_PK", dx_PK);
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
  const int64_t* counts = check_counts(op, counts_E, E, P);
  require_operand_dtype(op, "dy_PM", dy_PM);
  require_dtype(op, "x_PK", x_PK, dy_PM.dtype());
  require_dtype(op, "dw_EMK", dw_EMK, DType::F32);
  require_cuda(op, "dy_PM", dy_PM);
  require_cuda(op, "x_PK", x_PK);
  require_cuda(op, "dw_EMK", dw_EMK);
  // CudaBackendOptions::grouped_wgrad_wgmma: one launch for every expert where the kernel takes the shape
  // (bf16, dw's width a multiple of its tile: grouped_wgrad_wg.h), else cuBLASLt as below.
  if (ctx.cuda->grouped_wgrad_wgmma && dy_PM.dtype() == DType::BF16 &&
      grouped_wgrad::unsupported_reason(E, M, K, dy_PM.data(), x_PK.data()).empty()) {
    grouped_wgrad::backward_weight(ctx, dy_PM.data(), x_PK.data(), counts, E, P, M, K, dw_EMK.data_as<float>(), accumulate);
    return;
  }
  const size_t xs = dtype_size(dy_PM.dtype());
  for (int64_t e = 0, row = 0; e < E; row += counts[e], ++e) {
    if (counts[e] == 0 && accumulate) continue;  // (an empty sum with beta 0 zeroes dw[e]: matmul's k == 0 case)
    gemm_backward_weight(ctx, op, dy_PM.dtype(), byte_ptr(dy_PM) + row * M * xs, byte_ptr(x_PK) + row * K * xs,
                         byte_ptr_mut(dw_EMK) + e * M * K * sizeof(float), counts[e], K, M, accumulate);
  }
}

}  // namespace quill::cuda
