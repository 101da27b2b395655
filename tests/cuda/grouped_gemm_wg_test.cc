// The routed experts' forward and input-gradient GEMMs by the wgmma kernel (src/ops/cuda/grouped_gemm_wg.cu,
// behind CudaBackendOptions::grouped_gemm_kernel) against the CPU reference and against cuBLASLt's per-expert
// GEMMs: experts with no rows, with fewer rows than a tile, with row counts that are not multiples of the
// 128-row tile (a tile's last rows belong to the next expert, or lie past the tensor's end, and must not be
// stored), the same bits twice, nothing written outside the output, and shapes the kernel does not take served
// by cuBLASLt; the FP8 kernel (grouped_gemm_fp8_wg.cu) the same way against the CPU's FP8 reference (the same
// quantised values and factors, products in fp32) and against cuBLASLt's block-scaled GEMMs. Inputs are rounded to bf16 so that the reference sees the GPU's operands; the outputs are bf16
// (tolerance 1e-2 relative L2, as gemm_test.cc).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cuda/harness.h"
#include "ops/cuda/cuda_context.h"
#include "ops/cuda/grouped_gemm_wg.h"
#include "ops/fp8.h"
#include "ops/moe.h"
#include "util/test_util.h"

namespace quill {
namespace {

using test::inputs_ready;
using test::poisoned_output;
using test::round_bf16;
using test::to_device;
using test::to_host;

const DeviceContext kCpu = DeviceContext::cpu();
constexpr double kTolBf16 = 1e-2;

CudaBackend& wgmma_gpu() { return test::grouped_gpu(GroupedGemmKernel::kWgmma); }
CudaBackend& cublaslt_gpu() { return test::grouped_gpu(GroupedGemmKernel::kCublasLt); }

bool kernel_runs_here() { return cuda::grouped_gemm::unsupported_reason(1, 256, 64, nullptr, nullptr, nullptr).empty(); }

std::string describe(const std::vector<int64_t>& counts, int64_t M, int64_t K) {
  std::string tag = "grouped wgmma E=" + std::to_string(counts.size()) + " w [" + std::to_string(M) + ", " +
                    std::to_string(K) + "] counts {";
  for (int64_t c : counts) tag += " " + std::to_string(c);
  return tag + " }";
}

// One problem, w [E, M, K]: the wgmma backend's forward y [P, M] and input gradient dx [P, K] against the CPU's,
// twice (the same bits), into poisoned outputs with guards.
void check_grouped(const std::vector<int64_t>& counts, int64_t M, int64_t K, uint64_t seed) {
  const int64_t E = static_cast<int64_t>(counts.size());
  int64_t P = 0;
  for (int64_t c : counts) P += c;
  const std::string tag = describe(counts, M, K);
  SCOPED_TRACE(tag);
  const Tensor counts_E = test::host_counts(counts);
  const Tensor x = round_bf16(test::random_tensor({P, K}, DType::F32, seed));
  const Tensor w = round_bf16(test::random_tensor({E, M, K}, DType::F32, seed + 1));
  const Tensor dy = round_bf16(test::random_tensor({P, M}, DType::F32, seed + 2));
  Tensor y_ref = Tensor::empty({P, M}, DType::F32), dx_ref = Tensor::empty({P, K}, DType::F32);
  ops::grouped_linear_forward(kCpu, x, w, counts_E, y_ref);
  ops::grouped_linear_backward_input(kCpu, dy, w, counts_E, dx_ref);

  const DeviceContext ctx = wgmma_gpu().context();
  const Tensor xd = to_device(x, DType::BF16), wd = to_device(w, DType::BF16), dyd = to_device(dy, DType::BF16);
  Tensor ys[2], dxs[2];
  for (int run = 0; run < 2; ++run) {
    auto y = poisoned_output({P, M}, DType::BF16);
    auto dx = poisoned_output({P, K}, DType::BF16);
    inputs_ready();
    ops::grouped_linear_forward(ctx, xd, wd, counts_E, y->tensor());
    ops::grouped_linear_backward_input(ctx, dyd, wd, counts_E, dx->tensor());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    if (P > 0) {
      const double e_y = test::expect_close(tag + " y", test::to_host_f32(y->tensor()), y_ref, kTolBf16);
      const double e_dx = test::expect_close(tag + " dx", test::to_host_f32(dx->tensor()), dx_ref, kTolBf16);
      if (run == 0) std::printf("  %-70s rel L2 y %.3g, dx %.3g\n", tag.c_str(), e_y, e_dx);
    }
    EXPECT_TRUE(y->guards_intact()) << "grouped_linear_forward wrote outside y";
    EXPECT_TRUE(dx->guards_intact()) << "grouped_linear_backward_input wrote outside dx";
    ys[run] = to_host(y->tensor());
    dxs[run] = to_host(dx->tensor());
  }
  EXPECT_TRUE(test::same_bits(ys[0], ys[1])) << "two forward runs differ";
  EXPECT_TRUE(test::same_bits(dxs[0], dxs[1])) << "two input-gradient runs differ";
}

TEST(GroupedGemmWgmma, MatchesTheCpuOnEveryRowCount) {
  QUILL_REQUIRE_GPU();
  if (!kernel_runs_here()) GTEST_SKIP() << "the wgmma kernel needs an sm_90 GPU";
  // Row counts around the 128-row tile and the 64-row warpgroup half, empty experts first, in the middle and last;
  // the last expert's partial tile runs past the tensor's end (TMA's zeros).
  check_grouped({0, 100, 128, 1, 0, 200, 127, 129, 64, 65, 0}, 256, 512, 11);
  check_grouped({384, 384, 384}, 512, 256, 21);   // whole tiles; 4 and 8 contraction stages
  check_grouped({5}, 256, 256, 31);                // one expert, fewer rows than a warpgroup's half
  check_grouped({0, 0}, 256, 256, 41);             // no rows at all: nothing to launch
  check_grouped({300, 0, 517, 211, 7}, 768, 1024, 51);  // several column blocks per expert, long contraction
}

// A problem on the device only (no CPU reference: too slow at the training shapes): random bf16 x [P, K], w [E, M,
// K] and dy [P, M] for the experts' row counts.
struct DeviceProblem {
  int64_t P = 0;
  Tensor counts_E, xd, wd, dyd;
};
DeviceProblem device_problem(const std::vector<int64_t>& counts, int64_t M, int64_t K, uint64_t seed) {
  DeviceProblem d;
  for (int64_t c : counts) d.P += c;
  const int64_t E = static_cast<int64_t>(counts.size());
  d.counts_E = test::host_counts(counts);
  d.xd = to_device(round_bf16(test::random_tensor({d.P, K}, DType::F32, seed)), DType::BF16);
  d.wd = to_device(round_bf16(test::random_tensor({E, M, K}, DType::F32, seed + 1)), DType::BF16);
  d.dyd = to_device(round_bf16(test::random_tensor({d.P, M}, DType::F32, seed + 2)), DType::BF16);
  return d;
}

TEST(GroupedGemmWgmma, SeedShapedAgainstCublasLt) {
  QUILL_REQUIRE_GPU();
  if (!kernel_runs_here()) GTEST_SKIP() << "the wgmma kernel needs an sm_90 GPU";
  // A seed rank's 32 experts of ~384 rows (an expert without rows, one over 512), w [32, 2048, 4096] (the gate/up
  // projection's 4,096 rows halved keeps the test short): ~900 forward and ~1,800 input-gradient tiles, so each CTA
  // walks several (the FP8 kernel's wrong rows showed only so: Fp8SliceShapedAgainstCublasLt); the kernel against
  // cuBLASLt (the default backend), forward and input gradient.
  std::vector<int64_t> counts;
  for (int64_t e = 0; e < 32; ++e) counts.push_back(e == 3 ? 0 : e == 4 ? 600 : 300 + (e * 131) % 170);
  const int64_t M = 2048, K = 4096;
  const DeviceProblem d = device_problem(counts, M, K, 61);
  const int64_t P = d.P;
  const Tensor &counts_E = d.counts_E, &xd = d.xd, &wd = d.wd, &dyd = d.dyd;
  auto y_wg = poisoned_output({P, M}, DType::BF16), y_lt = poisoned_output({P, M}, DType::BF16);
  auto dx_wg = poisoned_output({P, K}, DType::BF16), dx_lt = poisoned_output({P, K}, DType::BF16);
  inputs_ready();
  ops::grouped_linear_forward(wgmma_gpu().context(), xd, wd, counts_E, y_wg->tensor());
  ops::grouped_linear_backward_input(wgmma_gpu().context(), dyd, wd, counts_E, dx_wg->tensor());
  ops::grouped_linear_forward(cublaslt_gpu().context(), xd, wd, counts_E, y_lt->tensor());
  ops::grouped_linear_backward_input(cublaslt_gpu().context(), dyd, wd, counts_E, dx_lt->tensor());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const double e_y = test::expect_close("y, wgmma against cuBLASLt", test::to_host_f32(y_wg->tensor()),
                                        test::to_host_f32(y_lt->tensor()), kTolBf16);
  const double e_dx = test::expect_close("dx, wgmma against cuBLASLt", test::to_host_f32(dx_wg->tensor()),
                                         test::to_host_f32(dx_lt->tensor()), kTolBf16);
  std::printf("  seed-shaped, wgmma against cuBLASLt: rel L2 y %.3g, dx %.3g\n", e_y, e_dx);
  // A wrong tile row stays under the relative L2 tolerance when it is one of thousands; each element is within a few
  // bf16 roundings of cuBLASLt's (the same products, perhaps another order), so none is far.
  EXPECT_EQ(test::far_elements(test::to_host_f32(y_wg->tensor()), test::to_host_f32(y_lt->tensor())), 0) << "y";
  EXPECT_EQ(test::far_elements(test::to_host_f32(dx_wg->tensor()), test::to_host_f32(dx_lt->tensor())), 0) << "dx";
  EXPECT_TRUE(y_wg->guards_intact());
  EXPECT_TRUE(dx_wg->guards_intact());
}

// One FP8 grouped forward and input gradient by `ctx`'s backend: w quantised on that backend, y and dx written into
// poisoned outputs with guards; both back on the host as F32.
struct Fp8GroupedRun {
  Tensor y, dx;
};
Fp8GroupedRun fp8_grouped_run(const DeviceContext& ctx, const Tensor& xd, const Tensor& wd, const Tensor& dyd,
                              const Tensor& counts_E) {
  const int64_t P = xd.dim(0), M = wd.dim(1), K = wd.dim(2);
  const ops::Fp8Tensor wq = ops::fp8_empty(ctx, wd.shape(), ops::Fp8Tiling::kBlocks128);
  auto y = poisoned_output({P, M}, DType::BF16);
  auto dx = poisoned_output({P, K}, DType::BF16);
  inputs_ready();
  ops::fp8_quantize(ctx, wd, wq);
  ops::fp8_grouped_linear_forward(ctx, xd, wq, counts_E, y->tensor());
  ops::fp8_grouped_linear_backward_input(ctx, dyd, wq, counts_E, dx->tensor());
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_TRUE(y->guards_intact()) << "fp8_grouped_linear_forward wrote outside y";
  EXPECT_TRUE(dx->guards_intact()) << "fp8_grouped_linear_backward_input wrote outside dx";
  return {test::to_host_f32(y->tensor()), test::to_host_f32(dx->tensor())};
}

// The FP8 grouped forward and input gradient, w [E, M, K] quantised in 128 x 128 blocks, the activations 1 x 128 by
// the ops: against the CPU (bf16 outputs, 1e-2 as fp8_test.cc), twice the same bits, and against cuBLASLt.
void check_fp8(const std::vector<int64_t>& counts, int64_t M, int64_t K, uint64_t seed) {
  const int64_t E = static_cast<int64_t>(counts.size());
  int64_t P = 0;
  for (int64_t c : counts) P += c;
  const std::string tag = "fp8 " + describe(counts, M, K);
  SCOPED_TRACE(tag);
  const Tensor counts_E = test::host_counts(counts);
  const Tensor x = round_bf16(test::random_tensor({P, K}, DType::F32, seed));
  const Tensor w = round_bf16(test::random_tensor({E, M, K}, DType::F32, seed + 1));
  const Tensor dy = round_bf16(test::random_tensor({P, M}, DType::F32, seed + 2));
  ops::Fp8Tensor wq = ops::fp8_empty(kCpu, {E, M, K}, ops::Fp8Tiling::kBlocks128);
  ops::fp8_quantize(kCpu, w, wq);
  Tensor y_ref = Tensor::empty({P, M}, DType::F32), dx_ref = Tensor::empty({P, K}, DType::F32);
  ops::fp8_grouped_linear_forward(kCpu, x, wq, counts_E, y_ref);
  ops::fp8_grouped_linear_backward_input(kCpu, dy, wq, counts_E, dx_ref);

  const Tensor xd = to_device(x, DType::BF16), wd = to_device(w, DType::BF16), dyd = to_device(dy, DType::BF16);
  Fp8GroupedRun got[2];  // runs 0, 1: the wgmma kernel
  for (int run = 0; run < 2; ++run) {
    got[run] = fp8_grouped_run(wgmma_gpu().context(), xd, wd, dyd, counts_E);
    const double e_y = test::expect_close(tag + " y", got[run].y, y_ref, kTolBf16);
    const double e_dx = test::expect_close(tag + " dx", got[run].dx, dx_ref, kTolBf16);
    if (run == 0) std::printf("  %-70s rel L2 y %.3g, dx %.3g\n", tag.c_str(), e_y, e_dx);
  }
  const Fp8GroupedRun lt = fp8_grouped_run(cublaslt_gpu().context(), xd, wd, dyd, counts_E);
  const double e_y = test::expect_close(tag + " y against cuBLASLt", lt.y, got[0].y, kTolBf16);
  std::printf("  %-70s against cuBLASLt: rel L2 y %.3g\n", tag.c_str(), e_y);
  EXPECT_TRUE(test::same_bits(got[0].y, got[1].y)) << "two forward runs differ";
  EXPECT_TRUE(test::same_bits(got[0].dx, got[1].dx)) << "two input-gradient runs differ";
}

TEST(GroupedGemmWgmma, Fp8MatchesTheCpuAndCublasLt) {
  QUILL_REQUIRE_GPU();
  if (!kernel_runs_here()) GTEST_SKIP() << "the wgmma kernel needs an sm_90 GPU";
  // Experts of 0, 1, 5, 16 (one padded block of rows), 130, 300 rows; the rows' padding to 16 and the next expert's
  // rows inside a tile must not be stored.
  check_fp8({5, 0, 130, 16, 300, 1, 128, 0}, 384, 256, 91);
  check_fp8({384, 384}, 256, 512, 95);
  check_fp8({200, 17, 384}, 256, 384, 97);  // three slices
  check_fp8({64, 100}, 128, 128, 99);        // one slice each way
}

// The FP8 kernel at the slice's shapes against cuBLASLt (no CPU reference: too slow at this size): 32 experts of an
// 8,192-token row's ~1,536 rows each, w [32, 4096, 2048] and its input gradient (contractions of 16 and 32 slices,
// ~12,000 and ~6,000 tiles, so each CTA walks dozens and the stage ring wraps within and across them), three runs
// the same bits. The tests above stop
// at 12 tiles (one per CTA) and two slices; the slice trained with the kernel as it was on an H100 gave gradient
// norms of 1e5-1e6 where cuBLASLt's GEMMs gave 1.5 (2026-12-07), and this test found its wrong rows.
TEST(GroupedGemmWgmma, Fp8SliceShapedAgainstCublasLt) {
  QUILL_REQUIRE_GPU();
  if (!kernel_runs_here()) GTEST_SKIP() << "the wgmma kernel needs an sm_90 GPU";
  std::vector<int64_t> counts;
  for (int64_t e = 0; e < 32; ++e) counts.push_back(e == 5 ? 0 : 1200 + (e * 397) % 700 + (e % 3));
  const DeviceProblem d = device_problem(counts, /*M=*/4096, /*K=*/2048, 71);
  const Tensor &counts_E = d.counts_E, &xd = d.xd, &wd = d.wd, &dyd = d.dyd;
  const Fp8GroupedRun lt = fp8_grouped_run(cublaslt_gpu().context(), xd, wd, dyd, counts_E);
  const DeviceContext ctx = wgmma_gpu().context();
  Fp8GroupedRun got[3];
  for (int run = 0; run < 3; ++run) {
    got[run] = fp8_grouped_run(ctx, xd, wd, dyd, counts_E);
    const std::string r = "run " + std::to_string(run);
    const double e_y = test::expect_close(r + " y, kernel against cuBLASLt", got[run].y, lt.y, kTolBf16);
    const double e_dx = test::expect_close(r + " dx, kernel against cuBLASLt", got[run].dx, lt.dx, kTolBf16);
    std::printf("  fp8 slice-shaped, %s against cuBLASLt: rel L2 y %.3g, dx %.3g\n", r.c_str(), e_y, e_dx);
  }
  EXPECT_TRUE(test::same_bits(got[0].y, got[1].y) && test::same_bits(got[0].y, got[2].y)) << "forward runs differ";
  EXPECT_TRUE(test::same_bits(got[0].dx, got[1].dx) && test::same_bits(got[0].dx, got[2].dx)) << "dx runs differ";
  EXPECT_TRUE(test::same_bits(got[0].y, lt.y) && test::same_bits(got[0].dx, lt.dx))
      << "the kernel's bits differ from cuBLASLt's (they add in the same order at these shapes)";
}

// The dense FP8 forward and input gradient through the kernel as one group (--grouped-gemm-kernel wgmma): against
// the CPU's FP8 reference, twice the same bits, against cuBLASLt (the auto choice for dense ops); an accumulating
// input gradient and an F32 output stay cuBLASLt's and still agree.
void check_fp8_dense(int64_t N, int64_t K, int64_t M, uint64_t seed) {
  const std::string tag = "fp8 dense N=" + std::to_string(N) + " K=" + std::to_string(K) + " M=" + std::to_string(M);
  SCOPED_TRACE(tag);
  const Tensor x = round_bf16(test::random_tensor({N, K}, DType::F32, seed));
  const Tensor w = round_bf16(test::random_tensor({M, K}, DType::F32, seed + 1));
  const Tensor dy = round_bf16(test::random_tensor({N, M}, DType::F32, seed + 2));
  ops::Fp8Tensor wq = ops::fp8_empty(kCpu, {M, K}, ops::Fp8Tiling::kBlocks128);
  ops::fp8_quantize(kCpu, w, wq);
  Tensor y_ref = Tensor::empty({N, M}, DType::F32), dx_ref = Tensor::empty({N, K}, DType::F32);
  ops::fp8_linear_forward(kCpu, x, wq, y_ref);
  ops::fp8_linear_backward_input(kCpu, dy, wq, dx_ref);
  const Tensor dx_twice_ref = Tensor::empty({N, K}, DType::F32);
  for (int64_t i = 0; i < N * K; ++i) dx_twice_ref.data_as<float>()[i] = 2.0f * dx_ref.data_as<float>()[i];

  const Tensor xd = to_device(x, DType::BF16), wd = to_device(w, DType::BF16), dyd = to_device(dy, DType::BF16);
  Tensor got[3][2];  // [run][y, dx]: runs 0, 1 the kernel, run 2 cuBLASLt
  for (int run = 0; run < 3; ++run) {
    const DeviceContext ctx = run < 2 ? wgmma_gpu().context() : cublaslt_gpu().context();
    const ops::Fp8Tensor wdq = ops::fp8_empty(ctx, {M, K}, ops::Fp8Tiling::kBlocks128);
    auto y = poisoned_output({N, M}, DType::BF16);
    auto dx = poisoned_output({N, K}, DType::BF16);
    auto dx_acc = poisoned_output({N, K}, DType::F32);
    inputs_ready();
    ops::fp8_quantize(ctx, wd, wdq);
    ops::fp8_linear_forward(ctx, xd, wdq, y->tensor());
    ops::fp8_linear_backward_input(ctx, dyd, wdq, dx->tensor());
    ops::fp8_linear_backward_input(ctx, dyd, wdq, dx_acc->tensor());
    ops::fp8_linear_backward_input(ctx, dyd, wdq, dx_acc->tensor(), /*accumulate=*/true);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_TRUE(y->guards_intact() && dx->guards_intact() && dx_acc->guards_intact()) << "a write outside its output";
    const double e_y = test::expect_close(tag + " y", test::to_host_f32(y->tensor()), y_ref, kTolBf16);
    const double e_dx = test::expect_close(tag + " dx", test::to_host_f32(dx->tensor()), dx_ref, kTolBf16);
    test::expect_close(tag + " dx accumulated (F32)", test::to_host_f32(dx_acc->tensor()), dx_twice_ref, kTolBf16);
    if (run != 1) std::printf("  %-50s %s: rel L2 y %.3g, dx %.3g\n", tag.c_str(), run ? "cuBLASLt" : "kernel", e_y,
                              e_dx);
    got[run][0] = to_host(y->tensor());
    got[run][1] = to_host(dx->tensor());
  }
  EXPECT_TRUE(test::same_bits(got[0][0], got[1][0])) << "two forward runs differ";
  EXPECT_TRUE(test::same_bits(got[0][1], got[1][1])) << "two input-gradient runs differ";
  std::printf("  %-50s kernel and cuBLASLt forward bits %s\n", tag.c_str(),
              test::same_bits(got[0][0], got[2][0]) ? "equal" : "differ");
}

TEST(GroupedGemmWgmma, Fp8DenseMatchesTheCpuAndCublasLt) {
  QUILL_REQUIRE_GPU();
  if (!kernel_runs_here()) GTEST_SKIP() << "the wgmma kernel needs an sm_90 GPU";
  check_fp8_dense(300, 512, 384, 101);    // rows padded to 304 inside the kernel's tiles, 3 column tiles
  check_fp8_dense(2048, 1024, 256, 103);  // many row tiles, the input gradient's contraction of 2 slices
}

TEST(GroupedGemmWgmma, ShapesItDoesNotTakeFallBackToCublasLt) {
  QUILL_REQUIRE_GPU();
  using cuda::grouped_gemm::unsupported_reason;
  EXPECT_NE(unsupported_reason(3, 300, 64, nullptr, nullptr, nullptr), "");  // columns off the tile
  EXPECT_NE(unsupported_reason(3, 256, 100, nullptr, nullptr, nullptr), "");  // contraction off the stage
  EXPECT_NE(unsupported_reason(cuda::grouped_gemm::kMaxExperts + 1, 256, 64, nullptr, nullptr, nullptr), "");
  const char* odd = reinterpret_cast<const char*>(0) + 8;
  EXPECT_NE(unsupported_reason(3, 256, 64, odd, nullptr, nullptr), "");  // not 16-byte aligned
  EXPECT_NE(cuda::grouped_gemm::fp8_unsupported_reason(3, 144, 128, nullptr, nullptr, nullptr), "");
  EXPECT_NE(cuda::grouped_gemm::fp8_unsupported_reason(3, 128, 272, nullptr, nullptr, nullptr), "");
  EXPECT_NE(cuda::grouped_gemm::fp8_unsupported_reason(3, 128, 0, nullptr, nullptr, nullptr), "");  // no slices
  if (kernel_runs_here()) {
    EXPECT_EQ(cuda::grouped_gemm::fp8_unsupported_reason(3, 128, 384, nullptr, nullptr, nullptr), "");
  }
  // Widths off the tile: the option's backend still gives the CPU's results (through cuBLASLt).
  check_grouped({13, 0, 29}, 70, 37, 71);
  check_grouped({13, 0, 29}, 256, 64, 81);  // the forward on the tile, the input gradient off it
}

}  // namespace
}  // namespace quill
