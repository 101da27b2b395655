// CUDA RMSNorm (src/ops/cuda/rmsnorm.cu) against the CPU reference, on rows from the per-head q/k
// norm's 16 wide to the model's 4096, and odd widths between. x and dy are rounded through bf16 first;
// w stays fp32. The backward gets the CPU's rstd on both sides, so its failure is its own. dw starts
// from nonzero contents and must come back as those plus the reference's column sums.
// Legend: N rows, D features.
#include "ops/rmsnorm.h"

#include <gtest/gtest.h>

#include <functional>
#include <ostream>
#include <string>
#include <tuple>
#include <utility>

#include "base/error.h"
#include "cuda/harness.h"
#include "util/test_util.h"

namespace quill {
namespace {

using test::expect_close;
using test::poisoned_output;
using test::random_tensor;
using test::round_bf16;
using test::to_device;
using test::to_guarded_device;
using test::to_host_f32;

constexpr double kEps = 1e-6;

using test::expect_error;

struct Case {
  int64_t N, D;
};

void PrintTo(const Case& c, std::ostream* os) { *os << "N" << c.N << "_D" << c.D; }

Tensor weight(int64_t D, uint64_t seed) {
  Tensor w = Tensor::empty({D}, DType::F32);
  test::fill_normal(w, seed, 0.2, 1.0);
  return w;
}

class CudaRmsNormTest : public ::testing::TestWithParam<Case> {};

TEST_P(CudaRmsNormTest, ForwardMatchesCpu) {
  QUILL_REQUIRE_GPU();
  const Case c = GetParam();
  const Tensor x = round_bf16(random_tensor({c.N, c.D}, DType::F32, 101, 1.7));
  const Tensor w = weight(c.D, 102);
  Tensor y_ref = Tensor::empty({c.N, c.D}, DType::F32), rstd_ref = Tensor::empty({c.N}, DType::F32);
  ops::rmsnorm_forward(DeviceContext::cpu(), x, w, kEps, y_ref, rstd_ref);

  auto y = poisoned_output({c.N, c.D}, DType::BF16);
  auto rstd = poisoned_output({c.N}, DType::F32);
  ops::rmsnorm_forward(test::gpu_ctx(), to_device(x, DType::BF16), to_device(w, DType::F32), kEps, y->tensor(),
                       rstd->tensor());
  expect_close("y", to_host_f32(y->tensor()), y_ref, 1e-2);
  expect_close("rstd", to_host_f32(rstd->tensor()), rstd_ref, 1e-5);
  EXPECT_TRUE(y->guards_intact()) << "y written outside its bounds";
  EXPECT_TRUE(rstd->guards_intact()) << "rstd written outside its bounds";
}

TEST_P(CudaRmsNormTest, BackwardMatchesCpu) {
  QUILL_REQUIRE_GPU();
  const Case c = GetParam();
  const Tensor x = round_bf16(random_tensor({c.N, c.D}, DType::F32, 201, 1.3));
  const Tensor w = weight(c.D, 202);
  const Tensor dy = round_bf16(random_tensor({c.N, c.D}, DType::F32, 203));
  Tensor y_ref = Tensor::empty({c.N, c.D}, DType::F32), rstd = Tensor::empty({c.N}, DType::F32);
  ops::rmsnorm_forward(DeviceContext::cpu(), x, w, kEps, y_ref, rstd);
  const Tensor dw_init = random_tensor({c.D}, DType::F32, 204, 0.5);
  Tensor dx_ref = Tensor::empty({c.N, c.D}, DType::F32), dw_ref = dw_init.clone();
  ops::rmsnorm_backward(DeviceContext::cpu(), x, w, rstd, dy, dx_ref, dw_ref);

  auto dx = poisoned_output({c.N, c.D}, DType::BF16);
  auto dw = to_guarded_device(dw_init, DType::F32);
  ops::rmsnorm_backward(test::gpu_ctx(), to_device(x, DType::BF16), to_device(w, DType::F32),
                        to_device(rstd, DType::F32), to_device(dy, DType::BF16), dx->tensor(), dw->tensor());
  expect_close("dx", to_host_f32(dx->tensor()), dx_ref, 1e-2);
  expect_close("dw", to_host_f32(dw->tensor()), dw_ref, 1e-4);
  EXPECT_TRUE(dx->guards_intact()) << "dx written outside its bounds";
  EXPECT_TRUE(dw->guards_intact()) << "dw written outside its bounds";
}

// The kernel paths (src/ops/cuda/rmsnorm.cu): D % 8 == 0 and D <= 8192 take the 16-byte vector path
// with G threads per row and kCpt chunks of 8 per thread; anything else the scalar path.
INSTANTIATE_TEST_SUITE_P(Shapes, CudaRmsNormTest,
                         ::testing::Values(Case{37, 16},     // per-head norm, head_dim 16: G = 2, 128 rows a block
                                           Case{300, 128},   // per-head norm, head_dim 128: G = 8 of 2 chunks
                                           Case{5003, 128},  // many rows per block and several blocks for dw
                                           Case{19, 4096},   // model width: G = 256 of 2 chunks
                                           Case{65, 1000},   // G = 64, some threads' second chunk past the row
                                           Case{40, 512},    // G = 32: one warp per row
                                           Case{11, 2056},   // G = 160 (5 warps), one row per block
                                           Case{7, 8192},    // widest vector row: 4 chunks per thread
                                           Case{3, 8200},    // D % 8 == 0 but too wide: scalar path
                                           Case{33, 8},      // G = 1: one chunk per row
                                           Case{1, 33},      // scalar: one row, one lane with two elements
                                           Case{50, 36},     // scalar: D % 8 == 4
                                           Case{9, 20},      // scalar
                                           Case{2053, 48})); // many rows: several row chunks for dw

TEST(CudaRmsNorm, ForwardInPlace) {
  QUILL_REQUIRE_GPU();
  const int64_t N = 37, D = 128;
  const Tensor x = round_bf16(random_tensor({N, D}, DType::F32, 301));
  const Tensor w = weight(D, 302);
  Tensor y_ref = Tensor::empty({N, D}, DType::F32), rstd_ref = Tensor::empty({N}, DType::F32);
  ops::rmsnorm_forward(DeviceContext::cpu(), x, w, kEps, y_ref, rstd_ref);
  auto xy = to_guarded_device(x, DType::BF16);
  auto rstd = poisoned_output({N}, DType::F32);
  ops::rmsnorm_forward(test::gpu_ctx(), xy->tensor(), to_device(w, DType::F32), kEps, xy->tensor(), rstd->tensor());
  expect_close("y (in place)", to_host_f32(xy->tensor()), y_ref, 1e-2);
  expect_close("rstd", to_host_f32(rstd->tensor()), rstd_ref, 1e-5);
}

// Backward with dx written over dy or over x (the op allows both), and with every bf16 tensor
// misaligned by 2 bytes (a row view; the scalar path). Vector-path and scalar-path widths.
enum class Layout { DxOverDy, DxOverX, Misaligned };

void check_backward_layout(int64_t N, int64_t D, Layout layout) {
  const char* name = layout == Layout::DxOverDy ? " dx over dy"
                     : layout == Layout::DxOverX  ? " dx over x"
                                                  : " misaligned";
  const std::string what = "N" + std::to_string(N) + "_D" + std::to_string(D) + name;
  const Tensor x = round_bf16(random_tensor({N, D}, DType::F32, 501, 1.3));
  const Tensor w = weight(D, 502);
  const Tensor dy = round_bf16(random_tensor({N, D}, DType::F32, 503));
  Tensor y_ref = Tensor::empty({N, D}, DType::F32), rstd = Tensor::empty({N}, DType::F32);
  ops::rmsnorm_forward(DeviceContext::cpu(), x, w, kEps, y_ref, rstd);
  const Tensor dw_init = random_tensor({D}, DType::F32, 504, 0.5);
  Tensor dx_ref = Tensor::empty({N, D}, DType::F32), dw_ref = dw_init.clone();
  ops::rmsnorm_backward(DeviceContext::cpu(), x, w, rstd, dy, dx_ref, dw_ref);

  const size_t shift = layout == Layout::Misaligned ? 2 : 0;
  auto d_x = to_guarded_device(x, DType::BF16, shift);
  auto d_dy = to_guarded_device(dy, DType::BF16, shift);
  auto d_dx = poisoned_output({N, D}, DType::BF16, shift);
  const Tensor& dx = layout == Layout::DxOverDy ? d_dy->tensor()
                     : layout == Layout::DxOverX  ? d_x->tensor()
                                                  : d_dx->tensor();
  auto dw = to_guarded_device(dw_init, DType::F32);
  ops::rmsnorm_backward(test::gpu_ctx(), d_x->tensor(), to_device(w, DType::F32), to_device(rstd, DType::F32),
                        d_dy->tensor(), dx, dw->tensor());
  expect_close("dx " + what, to_host_f32(dx), dx_ref, 1e-2);
  expect_close("dw " + what, to_host_f32(dw->tensor()), dw_ref, 1e-4);
  EXPECT_TRUE(d_x->guards_intact() && d_dy->guards_intact() && d_dx->guards_intact() && dw->guards_intact())
      << what << ": written outside its bounds";
}

TEST(CudaRmsNorm, BackwardInPlaceAndMisaligned) {
  QUILL_REQUIRE_GPU();
  for (auto [N, D] : {std::pair<int64_t, int64_t>{301, 128}, {13, 4096}, {45, 36}})
    for (Layout layout : {Layout::DxOverDy, Layout::DxOverX, Layout::Misaligned}) check_backward_layout(N, D, layout);
}

// Forward with x and y misaligned by 2 bytes (scalar path), and in place (y over x) at model width.
TEST(CudaRmsNorm, ForwardMisalignedAndInPlaceWide) {
  QUILL_REQUIRE_GPU();
  for (auto [N, D, shift] : {std::tuple<int64_t, int64_t, size_t>{301, 128, 2}, {13, 4096, 2}, {13, 4096, 0}}) {
    const std::string what = "N" + std::to_string(N) + "_D" + std::to_string(D) + (shift ? " misaligned" : " in place");
    const Tensor x = round_bf16(random_tensor({N, D}, DType::F32, 601));
    const Tensor w = weight(D, 602);
    Tensor y_ref = Tensor::empty({N, D}, DType::F32), rstd_ref = Tensor::empty({N}, DType::F32);
    ops::rmsnorm_forward(DeviceContext::cpu(), x, w, kEps, y_ref, rstd_ref);
    auto d_x = to_guarded_device(x, DType::BF16, shift);
    auto d_y = poisoned_output({N, D}, DType::BF16, shift);
    const Tensor& y = shift ? d_y->tensor() : d_x->tensor();
    auto rstd = poisoned_output({N}, DType::F32);
    ops::rmsnorm_forward(test::gpu_ctx(), d_x->tensor(), to_device(w, DType::F32), kEps, y, rstd->tensor());
    expect_close("y " + what, to_host_f32(y), y_ref, 1e-2);
    expect_close("rstd " + what, to_host_f32(rstd->tensor()), rstd_ref, 1e-5);
    EXPECT_TRUE(d_x->guards_intact() && d_y->guards_intact() && rstd->guards_intact())
        << what << ": written outside its bounds";
  }
}

TEST(CudaRmsNorm, WrongDtypesNameTheTensor) {
  QUILL_REQUIRE_GPU();
  const Tensor x = to_device(random_tensor({4, 16}, DType::F32, 401), DType::BF16);
  const Tensor w_bf16 = to_device(weight(16, 402), DType::BF16);
  const Tensor w = to_device(weight(16, 402), DType::F32);
  auto y = poisoned_output({4, 16}, DType::BF16);
  auto rstd = poisoned_output({4}, DType::F32);
  auto rstd_bf16 = poisoned_output({4}, DType::BF16);
  expect_error([&] { ops::rmsnorm_forward(test::gpu_ctx(), x, w_bf16, kEps, y->tensor(), rstd->tensor()); },
               "rmsnorm_forward: w has dtype BF16, expected F32");
  expect_error([&] { ops::rmsnorm_forward(test::gpu_ctx(), x, w, kEps, y->tensor(), rstd_bf16->tensor()); },
               "rmsnorm_forward: rstd has dtype BF16, expected F32");
  auto dw_short = poisoned_output({15}, DType::F32);
  expect_error([&] { ops::rmsnorm_backward(test::gpu_ctx(), x, w, rstd->tensor(), x, y->tensor(), dw_short->tensor()); },
               "rmsnorm_backward: dw has shape");
}

}  // namespace
}  // namespace quill
