// CUDA short convolution (src/ops/cuda/short_conv.cu) against the CPU reference. x and dy are rounded
// through bf16 first; w stays fp32. dw starts from nonzero contents and must come back as those plus
// the reference's sums over T. Shapes include T shorter than the taps and channel counts that leave a
// partial 32-channel tile; channel counts that are multiples of 8 run the vectorised kernels.
// Legend: T positions, C channels, K taps.
#include "ops/short_conv.h"

#include <gtest/gtest.h>

#include <functional>
#include <ostream>
#include <string>

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

using test::expect_error;

struct Case {
  int64_t T, C, K;
};

void PrintTo(const Case& c, std::ostream* os) { *os << "T" << c.T << "_C" << c.C << "_K" << c.K; }

class CudaShortConvTest : public ::testing::TestWithParam<Case> {};

TEST_P(CudaShortConvTest, ForwardMatchesCpu) {
  QUILL_REQUIRE_GPU();
  const Case c = GetParam();
  const Tensor x = round_bf16(random_tensor({c.T, c.C}, DType::F32, 501));
  const Tensor w = random_tensor({c.C, c.K}, DType::F32, 502, 0.5);
  Tensor y_ref = Tensor::empty({c.T, c.C}, DType::F32);
  ops::short_conv_forward(DeviceContext::cpu(), x, w, y_ref);

  auto y = poisoned_output({c.T, c.C}, DType::BF16);
  ops::short_conv_forward(test::gpu_ctx(), to_device(x, DType::BF16), to_device(w, DType::F32), y->tensor());
  expect_close("y", to_host_f32(y->tensor()), y_ref, 1e-2);
  EXPECT_TRUE(y->guards_intact()) << "y written outside its bounds";
}

TEST_P(CudaShortConvTest, BackwardMatchesCpu) {
  QUILL_REQUIRE_GPU();
  const Case c = GetParam();
  const Tensor x = round_bf16(random_tensor({c.T, c.C}, DType::F32, 601));
  const Tensor w = random_tensor({c.C, c.K}, DType::F32, 602, 0.5);
  const Tensor dy = round_bf16(random_tensor({c.T, c.C}, DType::F32, 603));
  const Tensor dw_init = random_tensor({c.C, c.K}, DType::F32, 604, 0.5);
  Tensor dx_ref = Tensor::empty({c.T, c.C}, DType::F32), dw_ref = dw_init.clone();
  ops::short_conv_backward(DeviceContext::cpu(), x, w, dy, dx_ref, dw_ref);

  auto dx = poisoned_output({c.T, c.C}, DType::BF16);
  auto dw = to_guarded_device(dw_init, DType::F32);
  ops::short_conv_backward(test::gpu_ctx(), to_device(x, DType::BF16), to_device(w, DType::F32),
                           to_device(dy, DType::BF16), dx->tensor(), dw->tensor());
  expect_close("dx", to_host_f32(dx->tensor()), dx_ref, 1e-2);
  expect_close("dw", to_host_f32(dw->tensor()), dw_ref, 1e-4);
  EXPECT_TRUE(dx->guards_intact()) << "dx written outside its bounds";
  EXPECT_TRUE(dw->guards_intact()) << "dw written outside its bounds";
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaShortConvTest,
                         ::testing::Values(Case{517, 67, 4},    // Inkling's taps, a partial channel tile
                                           Case{3, 40, 4},      // fewer positions than taps
                                           Case{1000, 256, 3},  // another tap count
                                           Case{4099, 96, 4},   // many positions: several chunks for dw
                                           Case{9, 5, 1},       // one tap: y = x + w * x
                                           Case{70, 33, 8},     // the kernel's largest tap count
                                           // C % 8 == 0: the vectorised kernels (8 channels a thread)
                                           Case{1000, 264, 4},  // 33 channel groups: a partial block
                                           Case{300, 8, 2},     // one group; rows not a multiple of a run
                                           Case{2100, 512, 8},  // several position blocks for dw, 8 taps
                                           Case{5, 16, 7}));    // fewer positions than taps

TEST(CudaShortConv, RejectsAliasingTooManyTapsAndWrongDtypes) {
  QUILL_REQUIRE_GPU();
  const Tensor x = to_device(random_tensor({10, 8}, DType::F32, 701), DType::BF16);
  const Tensor w = to_device(random_tensor({8, 4}, DType::F32, 702), DType::F32);
  expect_error([&] { ops::short_conv_forward(test::gpu_ctx(), x, w, x); }, "short_conv_forward: y must not alias x");
  const Tensor w9 = to_device(random_tensor({8, 9}, DType::F32, 703), DType::F32);
  auto y = poisoned_output({10, 8}, DType::BF16);
  expect_error([&] { ops::short_conv_forward(test::gpu_ctx(), x, w9, y->tensor()); }, "short_conv_forward: w has 9 taps");
  const Tensor w_bf16 = to_device(random_tensor({8, 4}, DType::F32, 704), DType::BF16);
  expect_error([&] { ops::short_conv_forward(test::gpu_ctx(), x, w_bf16, y->tensor()); },
               "short_conv_forward: w has dtype BF16, expected F32");
  auto dx = poisoned_output({10, 8}, DType::BF16);
  auto dw_bf16 = poisoned_output({8, 4}, DType::BF16);
  expect_error([&] { ops::short_conv_backward(test::gpu_ctx(), x, w, x, dx->tensor(), dw_bf16->tensor()); },
               "short_conv_backward: dw has dtype BF16, expected F32");
}

}  // namespace
}  // namespace quill
