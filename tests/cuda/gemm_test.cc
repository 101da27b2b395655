// CUDA linear and grouped linear (src/ops/cuda/gemm.cu) against the CPU reference.
// Inputs are random, rounded to bf16 first on the bf16 paths so that the reference sees exactly
// the GPU's operands; outputs are NaN-poisoned inside guard bands; dw starts nonzero so that the
// accumulation (beta = 1) is checked; sizes are odd, one case is above 1024 in every dimension,
// and row views give operands whose addresses are only 2- or 4-byte aligned.
// Tolerances (relative L2): bf16 outputs 1e-2 (observed ~4e-3 is bf16 rounding of the output);
// every fp32 output (router GEMMs, bf16 products written in fp32, dw) 1e-5.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <cstdio>
#include <string>
#include <vector>

#include "base/error.h"
#include "cuda/harness.h"
#include "ops/cuda/cuda_context.h"
#include "ops/cuda/cuda_resources.h"
#include "ops/cuda/gemm_plan_cache.h"
#include "ops/linear.h"
#include "ops/moe.h"
#include "util/test_util.h"

namespace quill {
namespace {

using test::inputs_ready;
using test::gpu_ctx;
using test::poisoned_output;
using test::round_bf16;
using test::to_device;
using test::to_guarded_device;
using test::to_host;
using test::to_host_f32;

const DeviceContext kCpu = DeviceContext::cpu();
constexpr double kTolBf16 = 1e-2, kTolF32 = 1e-5;

std::string dims(int64_t N, int64_t K, int64_t M) {
  return "N=" + std::to_string(N) + " K=" + std::to_string(K) + " M=" + std::to_string(M);
}

// A host input of `shape`: normal(0, 1), rounded to bf16 when the GPU sees it in bf16.
Tensor input(const Shape& shape, DType dtype, uint64_t seed) {
  Tensor t = test::random_tensor(shape, DType::F32, seed);
  return dtype == DType::BF16 ? round_bf16(t) : t;
}

// Forward, backward input (overwrite and accumulate) and backward weight of one shape.
// `in` is the dtype of x, w, dy; `out` the dtype of y and dx.
void check_linear(int64_t N, int64_t K, int64_t M, DType in, DType out, uint64_t seed) {
  const std::string tag = std::string("linear ") + dtype_name(in) + "->" + dtype_name(out) + " " + dims(N, K, M);
  SCOPED_TRACE(tag);
  const double tol = out == DType::BF16 ? kTolBf16 : kTolF32;
  const Tensor x = input({N, K}, in, seed), w = input({M, K}, in, seed + 1), dy = input({N, M}, in, seed + 2);
  const Tensor dx0 = input({N, K}, out, seed + 3);
  const Tensor dw0 = test::random_tensor({M, K}, DType::F32, seed + 4);

  Tensor y_ref = Tensor::empty({N, M}, DType::F32), dx_ref = Tensor::empty({N, K}, DType::F32);
  Tensor dx_acc_ref = dx0.clone(), dw_ref = dw0.clone();
  ops::linear_forward(kCpu, x, w, y_ref);
  ops::linear_backward_input(kCpu, dy, w, dx_ref);
  ops::linear_backward_input(kCpu, dy, w, dx_acc_ref, /*accumulate=*/true);
  ops::linear_backward_weight(kCpu, dy, x, dw_ref);

  const DeviceContext ctx = gpu_ctx();
  const Tensor xd = to_device(x, in), wd = to_device(w, in), dyd = to_device(dy, in);
  auto y = poisoned_output({N, M}, out);
  auto dx = poisoned_output({N, K}, out);
  auto dx_acc = to_guarded_device(dx0, out);
  auto dw = to_guarded_device(dw0, DType::F32);
  inputs_ready();
  ops::linear_forward(ctx, xd, wd, y->tensor());
  ops::linear_backward_input(ctx, dyd, wd, dx->tensor());
  ops::linear_backward_input(ctx, dyd, wd, dx_acc->tensor(), /*accumulate=*/true);
  ops::linear_backward_weight(ctx, dyd, xd, dw->tensor());

  std::printf("%s\n", tag.c_str());
  test::expect_device_close(tag + " y", y->tensor(), y_ref, tol);
  test::expect_device_close(tag + " dx", dx->tensor(), dx_ref, tol);
  test::expect_device_close(tag + " dx (accumulate)", dx_acc->tensor(), dx_acc_ref, tol);
  test::expect_device_close(tag + " dw (+= onto nonzero dw)", dw->tensor(), dw_ref, kTolF32);
  EXPECT_TRUE(y->guards_intact()) << "linear_forward wrote outside y";
  EXPECT_TRUE(dx->guards_intact()) << "linear_backward_input wrote outside dx";
  EXPECT_TRUE(dx_acc->guards_intact()) << "linear_backward_input (accumulate) wrote outside dx";
  EXPECT_TRUE(dw->guards_intact()) << "linear_backward_weight wrote outside dw";
}

TEST(LinearCuda, Bf16AwkwardSizes) {
  QUILL_REQUIRE_GPU();
  check_linear(37, 70, 130, DType::BF16, DType::BF16, 100);
  check_linear(130, 37, 70, DType::BF16, DType::BF16, 110);
  check_linear(1, 9, 3, DType::BF16, DType::BF16, 120);
}

TEST(LinearCuda, Bf16AboveOneThousandInEveryDimension) {
  QUILL_REQUIRE_GPU();
  check_linear(1037, 1100, 1061, DType::BF16, DType::BF16, 200);
}

TEST(LinearCuda, Bf16ProductsWrittenInFp32) {
  QUILL_REQUIRE_GPU();
  check_linear(37, 70, 130, DType::BF16, DType::F32, 300);
}

// The router: everything fp32, CUBLAS_COMPUTE_32F (no TF32: a TF32 product would miss 1e-5 by far).
TEST(LinearCuda, Fp32RouterPrecision) {
  QUILL_REQUIRE_GPU();
  check_linear(37, 70, 130, DType::F32, DType::F32, 400);
  check_linear(1029, 1031, 67, DType::F32, DType::F32, 410);
}

// Operands that start one row into a buffer with an odd row length: bf16 pointers aligned to
// 2 bytes only (cuBLASLt must be told, or it may pick a kernel that needs 16), fp32 dw to 4. Row 0
// of each output buffer must keep its poison / starting values.
TEST(LinearCuda, MisalignedRowViews) {
  QUILL_REQUIRE_GPU();
  const int64_t N = 45, K = 37, M = 29;
  const DType bf = DType::BF16;
  const Tensor xb = input({N + 1, K}, bf, 500), wb = input({M + 1, K}, bf, 501), dyb = input({N + 1, M}, bf, 502);
  const Tensor dw0 = test::random_tensor({M + 1, K}, DType::F32, 503);
  const Tensor x = xb.rows(1, N + 1), w = wb.rows(1, M + 1), dy = dyb.rows(1, N + 1);
  Tensor y_ref = Tensor::empty({N, M}, DType::F32), dx_ref = Tensor::empty({N, K}, DType::F32);
  Tensor dw_ref = dw0.clone();
  ops::linear_forward(kCpu, x, w, y_ref);
  ops::linear_backward_input(kCpu, dy, w, dx_ref);
  ops::linear_backward_weight(kCpu, dy, x, dw_ref.rows(1, M + 1));

  const DeviceContext ctx = gpu_ctx();
  const Tensor xd = to_device(xb, bf), wd = to_device(wb, bf), dyd = to_device(dyb, bf);
  auto y = poisoned_output({N + 1, M}, bf);
  auto dx = poisoned_output({N + 1, K}, bf);
  auto dw = to_guarded_device(dw0, DType::F32);
  inputs_ready();
  ops::linear_forward(ctx, xd.rows(1, N + 1), wd.rows(1, M + 1), y->tensor().rows(1, N + 1));
  ops::linear_backward_input(ctx, dyd.rows(1, N + 1), wd.rows(1, M + 1), dx->tensor().rows(1, N + 1));
  ops::linear_backward_weight(ctx, dyd.rows(1, N + 1), xd.rows(1, N + 1), dw->tensor().rows(1, M + 1));

  std::printf("linear misaligned views %s\n", dims(N, K, M).c_str());
  test::expect_device_close("misaligned y", y->tensor().rows(1, N + 1), y_ref, kTolBf16);
  test::expect_device_close("misaligned dx", dx->tensor().rows(1, N + 1), dx_ref, kTolBf16);
  test::expect_device_close("misaligned dw (whole buffer, row 0 untouched)", dw->tensor(), dw_ref, kTolF32);
  const Tensor y0 = to_host_f32(y->tensor().rows(0, 1)), dx0 = to_host_f32(dx->tensor().rows(0, 1));
  for (int64_t i = 0; i < M; ++i) EXPECT_TRUE(std::isnan(test::get(y0, i))) << "y row before the view written at " << i;
  for (int64_t i = 0; i < K; ++i) EXPECT_TRUE(std::isnan(test::get(dx0, i))) << "dx row before the view written at " << i;
  EXPECT_TRUE(y->guards_intact());
  EXPECT_TRUE(dx->guards_intact());
  EXPECT_TRUE(dw->guards_intact());
}

// Empty sums and empty outputs: K = 0 gives y = 0 and dx = 0 (or dx unchanged when accumulating);
// N = 0 leaves dw unchanged.
TEST(LinearCuda, EmptyDimensions) {
  QUILL_REQUIRE_GPU();
  const DeviceContext ctx = gpu_ctx();
  const DType bf = DType::BF16;
  {
    const int64_t N = 5, M = 7;  // K = 0
    const Tensor xd = to_device(Tensor::empty({N, 0}, DType::F32), bf), wd = to_device(Tensor::empty({M, 0}, DType::F32), bf);
    auto y = poisoned_output({N, M}, bf);
    inputs_ready();
    ops::linear_forward(ctx, xd, wd, y->tensor());
    test::expect_device_close("K=0 forward gives zeros", y->tensor(), Tensor::zeros({N, M}, DType::F32), 0.0);
    EXPECT_TRUE(y->guards_intact());
  }
  {
    const int64_t N = 5, K = 6;  // M = 0
    const Tensor dyd = to_device(Tensor::empty({N, 0}, DType::F32), bf), wd = to_device(Tensor::empty({0, K}, DType::F32), bf);
    auto dx = poisoned_output({N, K}, bf);
    const Tensor dx0 = input({N, K}, bf, 600);
    auto dx_acc = to_guarded_device(dx0, bf);
    inputs_ready();
    ops::linear_backward_input(ctx, dyd, wd, dx->tensor());
    ops::linear_backward_input(ctx, dyd, wd, dx_acc->tensor(), true);
    test::expect_device_close("M=0 backward input gives zeros", dx->tensor(), Tensor::zeros({N, K}, DType::F32), 0.0);
    test::expect_device_close("M=0 backward input (accumulate) leaves dx", dx_acc->tensor(), dx0, 0.0);
  }
  {
    const int64_t K = 6, M = 4;  // N = 0
    const Tensor dyd = to_device(Tensor::empty({0, M}, DType::F32), bf), xd = to_device(Tensor::empty({0, K}, DType::F32), bf);
    const Tensor dw0 = test::random_tensor({M, K}, DType::F32, 601);
    auto dw = to_guarded_device(dw0, DType::F32);
    auto y = poisoned_output({0, M}, bf);
    const Tensor wd = to_device(input({M, K}, bf, 602), bf);
    inputs_ready();
    ops::linear_backward_weight(ctx, dyd, xd, dw->tensor());
    ops::linear_forward(ctx, xd, wd, y->tensor());
    test::expect_device_close("N=0 backward weight leaves dw", dw->tensor(), dw0, 0.0);
    EXPECT_TRUE(y->guards_intact());
  }
}

// ------------------------------------------------------------------------------------------------
// Grouped linear.

void check_grouped(const std::vector<int64_t>& counts, int64_t K, int64_t M, DType in, DType out, uint64_t seed) {
  const int64_t E = static_cast<int64_t>(counts.size());
  int64_t P = 0;
  for (int64_t c : counts) P += c;
  std::string tag = std::string("grouped ") + dtype_name(in) + "->" + dtype_name(out) + " P=" + std::to_string(P) +
                    " K=" + std::to_string(K) + " M=" + std::to_string(M) + " counts {";
  for (int64_t c : counts) tag += " " + std::to_string(c);
  tag += " }";
  SCOPED_TRACE(tag);
  const double tol = out == DType::BF16 ? kTolBf16 : kTolF32;
  Tensor counts_E = Tensor::empty({E}, DType::I64);
  for (int64_t e = 0; e < E; ++e) counts_E.data_as<int64_t>()[e] = counts[e];
  const Tensor x = input({P, K}, in, seed), w = input({E, M, K}, in, seed + 1), dy = input({P, M}, in, seed + 2);
  const Tensor dw0 = test::random_tensor({E, M, K}, DType::F32, seed + 3);
  Tensor y_ref = Tensor::empty({P, M}, DType::F32), dx_ref = Tensor::empty({P, K}, DType::F32);
  Tensor dw_ref = dw0.clone();
  ops::grouped_linear_forward(kCpu, x, w, counts_E, y_ref);
  ops::grouped_linear_backward_input(kCpu, dy, w, counts_E, dx_ref);
  ops::grouped_linear_backward_weight(kCpu, dy, x, counts_E, dw_ref);

  const DeviceContext ctx = gpu_ctx();
  const Tensor xd = to_device(x, in), wd = to_device(w, in), dyd = to_device(dy, in);
  auto y = poisoned_output({P, M}, out);
  auto dx = poisoned_output({P, K}, out);
  auto dw = to_guarded_device(dw0, DType::F32);
  inputs_ready();
  ops::grouped_linear_forward(ctx, xd, wd, counts_E, y->tensor());
  ops::grouped_linear_backward_input(ctx, dyd, wd, counts_E, dx->tensor());
  ops::grouped_linear_backward_weight(ctx, dyd, xd, counts_E, dw->tensor());

  std::printf("%s\n", tag.c_str());
  if (P > 0) {
    test::expect_device_close(tag + " y", y->tensor(), y_ref, tol);
    test::expect_device_close(tag + " dx", dx->tensor(), dx_ref, tol);
  }
  test::expect_device_close(tag + " dw (+= onto nonzero dw)", dw->tensor(), dw_ref, kTolF32);
  // An expert without rows keeps its dw bit for bit.
  const Tensor dw_host = to_host(dw->tensor());
  for (int64_t e = 0; e < E; ++e) {
    if (counts[e] != 0) continue;
    const float* got = dw_host.data_as<float>() + e * M * K;
    const float* want = dw0.data_as<float>() + e * M * K;
    int64_t changed = 0;
    for (int64_t i = 0; i < M * K; ++i) changed += got[i] != want[i];
    EXPECT_EQ(changed, 0) << "dw of expert " << e << " (no rows) changed in " << changed << " elements";
  }
  EXPECT_TRUE(y->guards_intact()) << "grouped_linear_forward wrote outside y";
  EXPECT_TRUE(dx->guards_intact()) << "grouped_linear_backward_input wrote outside dx";
  EXPECT_TRUE(dw->guards_intact()) << "grouped_linear_backward_weight wrote outside dw";
}

TEST(GroupedLinearCuda, Bf16WithEmptyExperts) {
  QUILL_REQUIRE_GPU();
  // Odd K and M: every expert's block of rows starts at a 2- or 4-byte aligned address.
  check_grouped({13, 0, 29, 1, 20, 0}, 70, 37, DType::BF16, DType::BF16, 700);
  check_grouped({0, 0, 41}, 37, 70, DType::BF16, DType::BF16, 710);
  check_grouped({300, 0, 517, 211}, 264, 520, DType::BF16, DType::BF16, 720);
}

// The plan cache's buckets: sizes up to one bucket are exact, larger ones round up to a multiple of it,
// so every size maps to a bucket at least as large (a bucket's algorithm never sees a larger problem).
TEST(GemmPlanCache, BucketsRoundUpAndKeysCompareByValue) {
  using cuda::GemmPlanCache;
  EXPECT_EQ(GemmPlanCache::bucket(1), 1u);
  EXPECT_EQ(GemmPlanCache::bucket(256), 256u);
  EXPECT_EQ(GemmPlanCache::bucket(257), 512u);
  EXPECT_EQ(GemmPlanCache::bucket(512), 512u);
  EXPECT_EQ(GemmPlanCache::bucket(8191), 8192u);
  for (uint64_t n : {1ull, 100ull, 255ull, 300ull, 1000ull, 4097ull, 49152ull}) {
    EXPECT_GE(GemmPlanCache::bucket(n), n);
    EXPECT_LT(GemmPlanCache::bucket(n), n + GemmPlanCache::kBucket);
  }
  cuda::GemmPlanKey a{0, 1, 2, 2, 0, 4096, 512, 2048, 2048, 2048, 256, 256, 256, false, -1, -1};
  cuda::GemmPlanKey b = a;
  EXPECT_TRUE(a == b);
  EXPECT_EQ(cuda::GemmPlanKeyHash{}(a), cuda::GemmPlanKeyHash{}(b));
  b.accumulate = true;
  EXPECT_FALSE(a == b);
  b = a;
  b.n = 768;
  EXPECT_FALSE(a == b);
  b = a;
  b.b_scale_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;  // an FP8 operand's scales
  EXPECT_FALSE(a == b);
}

// The plan cache (src/ops/cuda/gemm_plan_cache.h) runs one bucket's algorithm on every row count of
// the bucket: row counts spread over three buckets, each compared with the CPU, and the cache is hit.
TEST(GroupedLinearCuda, PlanCacheBucketsRowCounts) {
  QUILL_REQUIRE_GPU();
  const DeviceContext ctx = gpu_ctx();
  check_grouped({257, 300, 511, 512, 1, 513, 700, 768, 1000, 1023}, 256, 520, DType::BF16, DType::BF16, 730);
  check_grouped({258, 301, 509, 766, 1021, 255}, 256, 520, DType::BF16, DType::BF16, 740);
  ASSERT_NE(ctx.cuda->gemm_plans, nullptr);
  EXPECT_GT(ctx.cuda->gemm_plans->hits, 0);
  EXPECT_EQ(ctx.cuda->gemm_plans->fallbacks, 0) << "a bucket's algorithm refused a problem of its bucket";
}

// Issue 24: the algorithm of a shape must not depend on which call came first. Two fresh backends
// (each with its own plan cache) run the same grouped problems in opposite orders: every key both caches
// hold maps to the same cuBLASLt algorithm (the same bytes), and every problem gives the same bits.
TEST(GemmPlanCache, TheSameShapesGetTheSameAlgorithmsInAnyOrder) {
  QUILL_REQUIRE_GPU();
  const std::vector<std::vector<int64_t>> problems = {{257, 300, 511}, {1, 513, 700}, {768, 1000, 1023}, {0, 258, 5}};
  const int64_t K = 256, M = 520;
  auto run = [&](const std::vector<size_t>& order, std::vector<std::vector<uint16_t>>& outputs) {
    CudaBackend backend(0);
    const DeviceContext ctx = backend.context();
    outputs.assign(problems.size(), {});
    for (size_t i : order) {
      const std::vector<int64_t>& counts = problems[i];
      const int64_t E = static_cast<int64_t>(counts.size());
      int64_t P = 0;
      for (int64_t c : counts) P += c;
      Tensor counts_E = Tensor::empty({E}, DType::I64);
      for (int64_t e = 0; e < E; ++e) counts_E.data_as<int64_t>()[e] = counts[e];
      const Tensor x = to_device(input({P, K}, DType::BF16, 40 + i), DType::BF16);
      const Tensor w = to_device(input({E, M, K}, DType::BF16, 50 + i), DType::BF16);
      Tensor y = Tensor::empty({P, M}, DType::BF16, *ctx.allocator);
      ops::grouped_linear_forward(ctx, x, w, counts_E, y);
      const Tensor host = to_host(y);
      const auto* bits = static_cast<const uint16_t*>(host.data());
      outputs[i].assign(bits, bits + host.numel());
    }
    backend.synchronize();
    return ctx.cuda->gemm_plans ? *ctx.cuda->gemm_plans : cuda::GemmPlanCache{};
  };
  std::vector<std::vector<uint16_t>> out_a, out_b;
  const cuda::GemmPlanCache a = run({0, 1, 2, 3}, out_a);
  const cuda::GemmPlanCache b = run({3, 2, 1, 0}, out_b);
  ASSERT_FALSE(a.algos.empty());
  EXPECT_EQ(a.algos.size(), b.algos.size());
  int64_t common = 0;
  for (const auto& [key, algo] : a.algos) {
    const auto it = b.algos.find(key);
    if (it == b.algos.end()) continue;
    ++common;
    EXPECT_EQ(std::memcmp(&algo, &it->second, sizeof(algo)), 0) << "m=" << key.m << " n=" << key.n << " k=" << key.k;
  }
  EXPECT_EQ(common, static_cast<int64_t>(a.algos.size()));
  for (size_t i = 0; i < problems.size(); ++i) EXPECT_EQ(out_a[i], out_b[i]) << "problem " << i;
}

TEST(GroupedLinearCuda, Fp32AndFp32Outputs) {
  QUILL_REQUIRE_GPU();
  check_grouped({13, 0, 29, 1, 20}, 70, 37, DType::F32, DType::F32, 800);
  check_grouped({13, 0, 29, 1, 20}, 70, 37, DType::BF16, DType::F32, 810);
}

TEST(GroupedLinearCuda, NoRowsAtAll) {
  QUILL_REQUIRE_GPU();
  check_grouped({0, 0, 0}, 16, 24, DType::BF16, DType::BF16, 900);
}

// ------------------------------------------------------------------------------------------------
// Errors: a wrong dtype, shape, device or count is a quill::Error naming the op and the tensor.

template <typename F>
void expect_error(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected a quill::Error containing '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "message: " << e.what();
  }
}

TEST(LinearCuda, WrongDtypeShapeOrDeviceThrows) {
  QUILL_REQUIRE_GPU();
  const DeviceContext ctx = gpu_ctx();
  const Tensor x = to_device(input({5, 4}, DType::BF16, 1), DType::BF16);
  const Tensor w = to_device(input({3, 4}, DType::BF16, 2), DType::BF16);
  const Tensor w32 = to_device(input({3, 4}, DType::F32, 2), DType::F32);
  const Tensor y = to_device(Tensor::zeros({5, 3}, DType::F32), DType::BF16);
  const Tensor dy = to_device(input({5, 3}, DType::BF16, 3), DType::BF16);
  const Tensor dw_bf16 = to_device(Tensor::zeros({3, 4}, DType::F32), DType::BF16);
  const Tensor y64 = to_device(Tensor::zeros({5, 3}, DType::F32), DType::F64);
  const Tensor host_x = convert_dtype(input({5, 4}, DType::BF16, 1), DType::BF16);
  inputs_ready();
  expect_error([&] { ops::linear_forward(ctx, x, w32, y); }, "linear_forward: w has dtype F32, expected BF16");
  expect_error([&] { ops::linear_forward(ctx, x, w, y64); }, "linear_forward: y has dtype F64");
  expect_error([&] { ops::linear_forward(ctx, host_x, w, y); }, "linear_forward: x must be a CUDA tensor");
  expect_error([&] { ops::linear_forward(ctx, x, w, dy.reshape({3, 5})); }, "linear_forward: y has shape");
  expect_error([&] { ops::linear_backward_weight(ctx, dy, x, dw_bf16); },
               "linear_backward_weight: dw has dtype BF16, expected F32");
  expect_error([&] { ops::linear_backward_input(ctx, dy, w32, x); }, "linear_backward_input: w has dtype F32");

  Tensor counts = Tensor::empty({2}, DType::I64);
  counts.data_as<int64_t>()[0] = 2;
  counts.data_as<int64_t>()[1] = 2;  // sums to 4, x has 5 rows
  const Tensor w_EMK = to_device(input({2, 3, 4}, DType::BF16, 4), DType::BF16);
  expect_error([&] { ops::grouped_linear_forward(ctx, x, w_EMK, counts, y); },
               "grouped_linear_forward: counts_E sums to 4, but there are 5 rows");
  counts.data_as<int64_t>()[1] = 3;
  const Tensor w_EMK32 = to_device(input({2, 3, 4}, DType::F32, 4), DType::F32);
  expect_error([&] { ops::grouped_linear_forward(ctx, x, w_EMK32, counts, y); },
               "grouped_linear_forward: w_EMK has dtype F32, expected BF16");
  expect_error([&] { ops::grouped_linear_backward_weight(ctx, dy, x, counts, w_EMK); },
               "grouped_linear_backward_weight: dw_EMK has dtype BF16, expected F32");
}

}  // namespace
}  // namespace quill
