// The routed experts' weight gradient by the wgmma kernel (src/ops/cuda/grouped_wgrad_wg.cu, behind
// CudaBackendOptions::grouped_wgrad_kernel wgmma) against the CPU reference and against cuBLASLt's per-expert GEMMs:
// experts with no rows, with fewer rows than a stage, with row counts that are not multiples of 64 (an
// expert's last stage holds the next expert's rows, which must not count), the first write (dw poisoned with
// NaN) and the accumulation onto a nonzero dw, the same bits twice, nothing written outside dw, and a shape
// the kernel does not take served by cuBLASLt; through the op and called directly. Inputs are rounded to bf16 so that the reference
// sees the GPU's operands; dw is fp32 (tolerance 1e-5 relative L2, as gemm_test.cc).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "cuda/harness.h"
#include "ops/cuda/cuda_context.h"
#include "ops/cuda/grouped_wgrad_wg.h"
#include "ops/moe.h"
#include "util/test_util.h"

namespace quill {
namespace {

using test::inputs_ready;
using test::poisoned_output;
using test::round_bf16;
using test::to_device;
using test::to_guarded_device;
using test::to_host;

const DeviceContext kCpu = DeviceContext::cpu();
constexpr double kTolF32 = 1e-5;

CudaBackend& wgmma_gpu() { return test::grouped_gpu(GroupedGemmKernel::kWgmma); }
// cuBLASLt's GEMM per expert (the default backend's choice is auto, which takes the kernel at these shapes).
CudaBackend& cublaslt_gpu() { return test::grouped_gpu(GroupedGemmKernel::kCublasLt); }

bool kernel_runs_here() {
  return cuda::grouped_wgrad::unsupported_reason(1, 128, 256, nullptr, nullptr).empty();
}

// dw (+)= dy^T x per expert on the GPU: through the op (the wgmma backend, or cuBLASLt for shapes the kernel does
// not take), or the kernel called directly.
using WgradRun = std::function<void(const Tensor& dy, const Tensor& x, const Tensor& counts, const Tensor& dw, bool)>;

WgradRun through_the_op() {
  return [](const Tensor& dy, const Tensor& x, const Tensor& counts, const Tensor& dw, bool accumulate) {
    ops::grouped_linear_backward_weight(wgmma_gpu().context(), dy, x, counts, dw, accumulate);
  };
}

WgradRun direct() {
  return [](const Tensor& dy, const Tensor& x, const Tensor& counts, const Tensor& dw, bool accumulate) {
    cuda::grouped_wgrad::backward_weight(wgmma_gpu().context(), dy.data(), x.data(), counts.data_as<int64_t>(),
                                         counts.dim(0), dy.dim(0), dy.dim(1), x.dim(1), dw.data_as<float>(), accumulate);
  };
}

// One problem: the GPU's dw (by `run`) against the CPU's, accumulating onto dw0 and as a first write, twice.
void check_wgrad(const std::vector<int64_t>& counts, int64_t M, int64_t N, uint64_t seed,
                 const WgradRun& run_gpu = through_the_op()) {
  const int64_t E = static_cast<int64_t>(counts.size());
  int64_t P = 0;
  for (int64_t c : counts) P += c;
  std::string tag = "grouped wgrad E=" + std::to_string(E) + " M=" + std::to_string(M) + " N=" + std::to_string(N) + " {";
  for (int64_t c : counts) tag += " " + std::to_string(c);
  tag += " }";
  SCOPED_TRACE(tag);
  const Tensor counts_E = test::host_counts(counts);
  const Tensor dy = round_bf16(test::random_tensor({P, M}, DType::F32, seed));
  const Tensor x = round_bf16(test::random_tensor({P, N}, DType::F32, seed + 1));
  const Tensor dw0 = test::random_tensor({E, M, N}, DType::F32, seed + 2);
  Tensor acc_ref = dw0.clone(), first_ref = Tensor::zeros({E, M, N}, DType::F32);
  ops::grouped_linear_backward_weight(kCpu, dy, x, counts_E, acc_ref, /*accumulate=*/true);
  ops::grouped_linear_backward_weight(kCpu, dy, x, counts_E, first_ref, /*accumulate=*/false);

  const Tensor dyd = to_device(dy, DType::BF16), xd = to_device(x, DType::BF16);
  Tensor runs[2];
  for (int run = 0; run < 2; ++run) {
    auto acc = to_guarded_device(dw0, DType::F32);
    auto first = poisoned_output({E, M, N}, DType::F32);
    inputs_ready();
    run_gpu(dyd, xd, counts_E, acc->tensor(), true);
    run_gpu(dyd, xd, counts_E, first->tensor(), false);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const double e_acc = test::expect_close(tag + " dw (+=)", test::to_host_f32(acc->tensor()), acc_ref, kTolF32);
    const double e_first = test::expect_close(tag + " dw (first write)", test::to_host_f32(first->tensor()), first_ref,
                                              kTolF32);
    if (run == 0) std::printf("  %-70s rel L2 += %.3g, first write %.3g\n", tag.c_str(), e_acc, e_first);
    EXPECT_TRUE(acc->guards_intact()) << "wrote outside dw";
    EXPECT_TRUE(first->guards_intact()) << "wrote outside dw";
    // An expert without rows keeps its dw bit for bit when accumulating, and is zero after a first write.
    const Tensor got = to_host(acc->tensor()), got_first = to_host(first->tensor());
    for (int64_t e = 0; e < E; ++e) {
      if (counts[e] != 0) continue;
      EXPECT_EQ(std::memcmp(got.data_as<float>() + e * M * N, dw0.data_as<float>() + e * M * N, M * N * 4), 0)
          << "dw of expert " << e << " (no rows) changed";
      for (int64_t i = 0; i < M * N; ++i)
        ASSERT_EQ(got_first.data_as<float>()[e * M * N + i], 0.f) << "expert " << e << " element " << i;
    }
    runs[run] = got;
  }
  EXPECT_TRUE(test::same_bits(runs[0], runs[1])) << "two runs differ";
}

TEST(GroupedWgradWgmma, MatchesTheCpuOnEveryRowCount) {
  QUILL_REQUIRE_GPU();
  if (!kernel_runs_here()) GTEST_SKIP() << "the wgmma kernel needs an sm_90 GPU";
  // Row counts around the 64-row stage, empty experts first, in the middle and last.
  check_wgrad({0, 100, 64, 1, 0, 200, 63, 65, 0}, 256, 512, 11);
  check_wgrad({384, 384, 384, 384}, 128, 256, 21);
  check_wgrad({5}, 384, 768, 31);
  check_wgrad({0, 0}, 128, 256, 41);  // no rows at all
}

TEST(GroupedWgradWgmma, CalledDirectlyMatchesTheCpu) {
  QUILL_REQUIRE_GPU();
  if (!kernel_runs_here()) GTEST_SKIP() << "the wgmma kernel needs an sm_90 GPU";
  const WgradRun run = direct();
  check_wgrad({0, 100, 64, 1, 0, 200, 63, 65, 0}, 256, 512, 11, run);
  check_wgrad({0, 0}, 128, 256, 41, run);
  // More tiles than a CTA per multiprocessor, and stages that wrap the three-deep ring many times.
  check_wgrad({700, 0, 333, 1, 64}, 512, 1024, 71, run);
}

// An experimental form of the kernel (grouped_wgrad_wg.h: Form): the CPU's dw, and the chosen half staging's bits (the
// same sums, the same one addition per element), accumulating and writing, one source and two.
void expect_the_half_stagings_bits(cuda::grouped_wgrad::Form form) {
  using cuda::grouped_wgrad::Form;
  const WgradRun run = [form](const Tensor& dy, const Tensor& x, const Tensor& counts, const Tensor& dw,
                              bool accumulate) {
    cuda::grouped_wgrad::backward_weight(wgmma_gpu().context(), dy.data(), x.data(), counts.data_as<int64_t>(),
                                         counts.dim(0), dy.dim(0), dy.dim(1), x.dim(1), dw.data_as<float>(), accumulate,
                                         nullptr, form);
  };
  check_wgrad({0, 100, 64, 1, 0, 200, 63, 65, 0}, 256, 512, 11, run);
  check_wgrad({0, 0}, 128, 256, 41, run);
  check_wgrad({700, 0, 333, 1, 64}, 512, 1024, 71, run);  // stages that wrap the ring many times
  const std::vector<int64_t> counts = {384, 401, 350, 0, 512, 384, 129, 383}, counts_b = {17, 0, 64, 5, 0, 300, 1, 0};
  const int64_t E = 8, M = 512, N = 1024;
  int64_t P = 0, Pb = 0;
  for (int64_t c : counts) P += c;
  for (int64_t c : counts_b) Pb += c;
  const Tensor counts_E = test::host_counts(counts), counts_bE = test::host_counts(counts_b);
  const Tensor dyd = to_device(round_bf16(test::random_tensor({P, M}, DType::F32, 91)), DType::BF16);
  const Tensor xd = to_device(round_bf16(test::random_tensor({P, N}, DType::F32, 92)), DType::BF16);
  const Tensor dybd = to_device(round_bf16(test::random_tensor({Pb, M}, DType::F32, 93)), DType::BF16);
  const Tensor xbd = to_device(round_bf16(test::random_tensor({Pb, N}, DType::F32, 94)), DType::BF16);
  const Tensor dw0 = test::random_tensor({E, M, N}, DType::F32, 95);
  const cuda::grouped_wgrad::Rows second{dybd.data(), xbd.data(), counts_bE.data_as<int64_t>(), Pb};
  for (bool two : {false, true}) {
    for (bool accumulate : {true, false}) {
      auto a = to_guarded_device(dw0, DType::F32), b = to_guarded_device(dw0, DType::F32);
      inputs_ready();
      for (auto [dw, f] : {std::pair{&a, Form::kHalf}, std::pair{&b, form}})
        cuda::grouped_wgrad::backward_weight(wgmma_gpu().context(), dyd.data(), xd.data(), counts_E.data_as<int64_t>(),
                                             E, P, M, N, (*dw)->tensor().data_as<float>(), accumulate,
                                             two ? &second : nullptr, f);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      EXPECT_TRUE(test::same_bits(to_host(a->tensor()), to_host(b->tensor())))
          << (two ? "two sources, " : "one source, ") << (accumulate ? "accumulating" : "writing");
      EXPECT_TRUE(b->guards_intact());
    }
  }
}

TEST(GroupedWgradWgmma, TheQuarterStagingGivesTheHalfStagingsBits) {
  QUILL_REQUIRE_GPU();
  if (!kernel_runs_here()) GTEST_SKIP() << "the wgmma kernel needs an sm_90 GPU";
  expect_the_half_stagings_bits(cuda::grouped_wgrad::Form::kQuarter);
}

TEST(GroupedWgradWgmma, ThePingpongFormGivesTheHalfStagingsBits) {
  QUILL_REQUIRE_GPU();
  if (!kernel_runs_here()) GTEST_SKIP() << "the wgmma kernel needs an sm_90 GPU";
  expect_the_half_stagings_bits(cuda::grouped_wgrad::Form::kPingpong);
}

// Two sources (two micro-batches' rows, --moe-expert-wgrad-micro-batches 2): the kernel reading both in place (called
// directly, and through the pair op on the wgmma backend), and a cuBLASLt backend's merge then GEMMs, against the
// CPU's merged rows' GEMM; accumulating and writing, partial stages in both sources, experts empty in one or both.
TEST(GroupedWgradWgmma, TwoSourcesMatchTheMergedRows) {
  QUILL_REQUIRE_GPU();
  if (!kernel_runs_here()) GTEST_SKIP() << "the wgmma kernel needs an sm_90 GPU";
  const std::vector<int64_t> a_counts = {0, 100, 64, 1, 0, 200, 63, 65, 0}, b_counts = {5, 0, 64, 0, 0, 130, 1, 63, 0};
  const int64_t E = 9, M = 256, N = 512;
  int64_t Pa = 0, Pb = 0;
  for (int64_t c : a_counts) Pa += c;
  for (int64_t c : b_counts) Pb += c;
  const Tensor ca = test::host_counts(a_counts), cb = test::host_counts(b_counts);
  const Tensor dy_a = round_bf16(test::random_tensor({Pa, M}, DType::F32, 81));
  const Tensor x_a = round_bf16(test::random_tensor({Pa, N}, DType::F32, 82));
  const Tensor dy_b = round_bf16(test::random_tensor({Pb, M}, DType::F32, 83));
  const Tensor x_b = round_bf16(test::random_tensor({Pb, N}, DType::F32, 84));
  const Tensor dw0 = test::random_tensor({E, M, N}, DType::F32, 85);
  const Tensor dya = to_device(dy_a, DType::BF16), xa = to_device(x_a, DType::BF16);
  const Tensor dyb = to_device(dy_b, DType::BF16), xb = to_device(x_b, DType::BF16);
  using Run = std::function<void(const Tensor&, bool)>;
  auto by_kernel = [&]() -> Run {
    return [&](const Tensor& dw, bool accumulate) {
      const cuda::grouped_wgrad::Rows second{dyb.data(), xb.data(), cb.data_as<int64_t>(), Pb};
      cuda::grouped_wgrad::backward_weight(wgmma_gpu().context(), dya.data(), xa.data(), ca.data_as<int64_t>(), E, Pa, M,
                                           N, dw.data_as<float>(), accumulate, &second);
    };
  };
  auto by_op = [&](const DeviceContext& ctx) -> Run {
    return [&, ctx](const Tensor& dw, bool accumulate) {
      ops::grouped_linear_backward_weight_pair(ctx, dya, xa, ca, dyb, xb, cb, dw, accumulate);
    };
  };
  const std::pair<const char*, Run> runs[] = {{"the kernel", by_kernel()},
                                              {"the op, wgmma backend", by_op(wgmma_gpu().context())},
                                              {"the op, cuBLASLt after the merge", by_op(cublaslt_gpu().context())}};
  for (bool accumulate : {true, false}) {
    Tensor ref = dw0.clone();
    ops::grouped_linear_backward_weight_pair(kCpu, dy_a, x_a, ca, dy_b, x_b, cb, ref, accumulate);
    for (const auto& [name, run] : runs) {
      const std::string what = std::string("two sources, ") + name + (accumulate ? ", accumulating" : ", writing");
      auto dw = accumulate ? to_guarded_device(dw0, DType::F32) : poisoned_output({E, M, N}, DType::F32);
      inputs_ready();
      run(dw->tensor(), accumulate);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << what;
      const double err = test::expect_close(what, test::to_host_f32(dw->tensor()), ref, kTolF32);
      std::printf("  %-60s rel L2 %.3g\n", what.c_str(), err);
      EXPECT_TRUE(dw->guards_intact()) << what << ": wrote outside dw";
    }
  }
}

TEST(GroupedWgradWgmma, SeedShapedAgainstCublasLt) {
  QUILL_REQUIRE_GPU();
  if (!kernel_runs_here()) GTEST_SKIP() << "the wgmma kernel needs an sm_90 GPU";
  // 8 experts of a seed rank's ~384 rows, width 1,024 x 2,048: the kernel against cuBLASLt.
  const std::vector<int64_t> counts = {384, 401, 350, 0, 512, 384, 129, 383};
  const int64_t E = 8, M = 1024, N = 2048;
  int64_t P = 0;
  for (int64_t c : counts) P += c;
  const Tensor counts_E = test::host_counts(counts);
  const Tensor dy = round_bf16(test::random_tensor({P, M}, DType::F32, 51));
  const Tensor x = round_bf16(test::random_tensor({P, N}, DType::F32, 52));
  const Tensor dw0 = test::random_tensor({E, M, N}, DType::F32, 53);
  auto a = to_guarded_device(dw0, DType::F32), b = to_guarded_device(dw0, DType::F32);
  const Tensor dyd = to_device(dy, DType::BF16), xd = to_device(x, DType::BF16);
  inputs_ready();
  ops::grouped_linear_backward_weight(wgmma_gpu().context(), dyd, xd, counts_E, a->tensor(), true);
  ops::grouped_linear_backward_weight(cublaslt_gpu().context(), dyd, xd, counts_E, b->tensor(), true);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const double err = test::expect_close("wgmma against cuBLASLt", test::to_host_f32(a->tensor()),
                                        test::to_host_f32(b->tensor()), kTolF32);
  std::printf("  seed-shaped dw, wgmma against cuBLASLt: rel L2 %.3g\n", err);
  EXPECT_TRUE(a->guards_intact());
}

TEST(GroupedWgradWgmma, ShapesItDoesNotTakeFallBackToCublasLt) {
  QUILL_REQUIRE_GPU();
  EXPECT_NE(cuda::grouped_wgrad::unsupported_reason(3, 100, 256, nullptr, nullptr), "");
  EXPECT_NE(cuda::grouped_wgrad::unsupported_reason(3, 128, 300, nullptr, nullptr), "");
  EXPECT_NE(cuda::grouped_wgrad::unsupported_reason(3, 128, 384, nullptr, nullptr), "");  // 1.5 tiles wide
  if (kernel_runs_here()) {
    EXPECT_EQ(cuda::grouped_wgrad::unsupported_reason(3, 128, 512, nullptr, nullptr), "");
  }
  EXPECT_NE(cuda::grouped_wgrad::unsupported_reason(cuda::grouped_wgrad::kMaxExperts + 1, 128, 256, nullptr, nullptr), "");
  // Widths off the tile: the option's backend still gives the CPU's dw (through cuBLASLt).
  check_wgrad({13, 0, 29}, 70, 37, 61);
}

}  // namespace
}  // namespace quill
