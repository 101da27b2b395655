// The cuBLASLt matmul core (lt_matmul.h).
#include "ops/cuda/lt_matmul.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "ops/cuda/cuda_resources.h"
#include "ops/cuda/gemm_plan_cache.h"

// Checks a cuBLASLt call made through the table `lt` (cublaslt_library.h), naming the status
// through cuBLASLt's own cublasLtGetStatusString (cublasGetStatusString lives in libcublas).
#define QUILL_LT_CHECK(lt, call)                                                                             \
  do {                                                                                                       \
    cublasStatus_t st_ = (call);                                                                             \
    QUILL_CHECK(st_ == CUBLAS_STATUS_SUCCESS, "cuBLASLt call {} failed: {}", #call, (lt).cublasLtGetStatusString(st_)); \
  } while (0)

namespace quill::cuda {

size_t cuda_type_size(cudaDataType_t t) { return t == CUDA_R_16BF ? 2 : t == CUDA_R_8F_E4M3 ? 1 : 4; }
const char* cuda_type_name(cudaDataType_t t) { return t == CUDA_R_16BF ? "bf16" : t == CUDA_R_8F_E4M3 ? "e4m3" : "f32"; }

namespace {

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

}  // namespace

void matmul(const DeviceContext& ctx, const char* op, cublasOperation_t ta, const Operand& a, cublasOperation_t tb,
            const Operand& b, void* d, cudaDataType_t d_type, uint64_t m, uint64_t n, uint64_t k, float beta,
            Vary vary, Candidate* candidate) {
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
  // Block-scaled operands (FP8): the mode says how cuBLASLt reads the scale tensor, the pointer where.
  auto set_scale = [&](const Operand& o, cublasLtMatmulDescAttributes_t mode_attr, cublasLtMatmulDescAttributes_t ptr_attr) {
    if (o.scale == nullptr) return;
    const int32_t mode = o.scale_mode;
    QUILL_LT_CHECK(lt, lt.cublasLtMatmulDescSetAttribute(desc.h, mode_attr, &mode, sizeof(mode)));
    QUILL_LT_CHECK(lt, lt.cublasLtMatmulDescSetAttribute(desc.h, ptr_attr, &o.scale, sizeof(o.scale)));
  };
  set_scale(a, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER);
  set_scale(b, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER);

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
                "{}: cuBLASLt has no algorithm for m={} n={} k={} (A {} {}x{} ld {} op {} align {} scale mode {}; B {} "
                "{}x{} ld {} op {} align {} scale mode {}; D {} ld {} align {}): {}",
                op, m, n, k, cuda_type_name(a.type), a.rows, a.cols, a.ld, ta == CUBLAS_OP_T ? "T" : "N", al_a,
                a.scale ? static_cast<int>(a.scale_mode) : -1, cuda_type_name(b.type), b.rows, b.cols, b.ld,
                tb == CUBLAS_OP_T ? "T" : "N", al_b, b.scale ? static_cast<int>(b.scale_mode) : -1,
                cuda_type_name(d_type), m, al_d, lt.cublasLtGetStatusString(why));
  };

  cublasLtMatmulAlgo_t algo{};
  bool from_cache = false;
  // Bucketing needs the varying dimension to be a column count of the operands it appears in.
  // k is a column count in the NT form of the bf16 weight gradient; in the TN form of FP8 (Hopper's FP8
  // tensor cores read both operands K-major) it is a row count, which the leading dimensions must cover.
  const bool k_in_columns = ta == CUBLAS_OP_N && tb == CUBLAS_OP_T && a.cols == k && b.cols == k;
  const bool k_in_rows = ta == CUBLAS_OP_T && tb == CUBLAS_OP_N && a.rows == k && b.rows == k &&
                         GemmPlanCache::bucket(k) <= static_cast<uint64_t>(std::min(a.ld, b.ld));
  const bool can_bucket = vary == Vary::kN ? (tb == CUBLAS_OP_N && b.cols == n) : (k_in_columns || k_in_rows);
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
  } else if (can_bucket) {
    if (!res.gemm_plans) res.gemm_plans = std::make_shared<GemmPlanCache>();
    GemmPlanCache& cache = *res.gemm_plans;
    const uint64_t nb = vary == Vary::kN ? GemmPlanCache::bucket(n) : n;
    const uint64_t kb = vary == Vary::kK ? GemmPlanCache::bucket(k) : k;
    const GemmPlanKey key{static_cast<int32_t>(ta), static_cast<int32_t>(tb), static_cast<int32_t>(a.type),
                          static_cast<int32_t>(b.type), static_cast<int32_t>(d_type), m, nb, kb, a.ld, b.ld,
                          al_a, al_b, al_d, beta != 0.0f, a.scale ? static_cast<int32_t>(a.scale_mode) : -1,
                          b.scale ? static_cast<int32_t>(b.scale_mode) : -1};
    auto it = cache.algos.find(key);
    if (it != cache.algos.end()) {
      algo = it->second;
      from_cache = true;
      ++cache.hits;
    } else {
      Operand ab = a, bb = b;
      if (vary == Vary::kN) {
        bb.cols = nb;
      } else if (k_in_columns) {
        ab.cols = kb;
        bb.cols = kb;
      } else {
        ab.rows = kb;
        bb.rows = kb;
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

}  // namespace quill::cuda
