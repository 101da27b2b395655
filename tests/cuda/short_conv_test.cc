// CUDA short convolution (src/ops/cuda/short_conv.cu) against the CPU reference. x and dy are rounded
// through bf16 first; w stays fp32. dw starts from nonzero contents and must come back as those plus
// the reference's sums over T. Channel counts that are multiples of 8 on 16-byte-aligned tensors run
// the 16-byte kernels (8 channels a thread, 64-channel blocks, tiles of 128 positions forward and 64
// backward at K <= 4, 64 and 32 above); any other channel count or a misaligned tensor runs the
// one-channel kernels (32-channel blocks, tiles of 32 and 16 positions). Shapes include T shorter
// than the taps, T not a multiple of any tile, partial channel blocks, K = 1 .. 8, the model's
// shapes, and misaligned views of each tensor.
// Legend: T positions, C channels, K taps.
#include "ops/short_conv.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <ostream>
#include <string>

#include "base/error.h"
#include "cuda/harness.h"
#include "ops/linear.h"
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
                                           Case{4099, 96, 4},   // many positions: several tiles per block
                                           Case{9, 5, 1},       // one tap: y = x + w * x
                                           Case{70, 33, 8},     // the kernel's largest tap count
                                           Case{4099, 1023, 4},  // odd C: one-channel kernels, many splits
                                           // C % 8 == 0: the 16-byte kernels (8 channels a thread)
                                           Case{1000, 264, 4},  // 33 channel groups: a partial block
                                           Case{300, 8, 2},     // one group; rows not a multiple of a tile
                                           Case{2100, 512, 8},  // several position blocks for dw, 8 taps
                                           Case{5, 16, 7},      // fewer positions than taps
                                           Case{1, 8, 4},       // one position
                                           Case{1000, 64, 1},   // one tap on the 16-byte kernels
                                           Case{777, 72, 5},    // 5 taps (2-row backward slices), 9 groups
                                           Case{129, 128, 4},   // one position past a forward tile
                                           Case{1500, 4096, 4},  // the model width; T not a multiple of a tile
                                           Case{8192, 1024, 4}));  // the k/v convolutions of one row

// With a halo (sequence parallelism: the K-1 positions before the chunk, ops/short_conv.h): y, dx, dhalo and
// dw against the CPU's halo form, the halo's first row zeros (a chunk at the row's start has only zeros).
class CudaShortConvHaloTest : public ::testing::TestWithParam<Case> {};

TEST_P(CudaShortConvHaloTest, MatchesCpu) {
  QUILL_REQUIRE_GPU();
  const Case c = GetParam();
  const int64_t H = c.K - 1;
  const Tensor x = round_bf16(random_tensor({c.T, c.C}, DType::F32, 1001));
  Tensor halo = round_bf16(random_tensor({H, c.C}, DType::F32, 1002));
  if (H > 1) std::fill_n(halo.data_as<float>(), c.C, 0.0f);
  const Tensor w = random_tensor({c.C, c.K}, DType::F32, 1003, 0.5);
  const Tensor dy = round_bf16(random_tensor({c.T, c.C}, DType::F32, 1004));
  const Tensor dw_init = random_tensor({c.C, c.K}, DType::F32, 1005, 0.5);
  Tensor y_ref = Tensor::empty({c.T, c.C}, DType::F32), dx_ref = Tensor::empty({c.T, c.C}, DType::F32);
  Tensor dhalo_ref = Tensor::empty({H, c.C}, DType::F32), dw_ref = dw_init.clone();
  ops::short_conv_forward(DeviceContext::cpu(), x, w, y_ref, halo);
  ops::short_conv_backward(DeviceContext::cpu(), x, w, dy, dx_ref, dw_ref, halo, dhalo_ref);

  const Tensor xd = to_device(x, DType::BF16), wd = to_device(w, DType::F32), dyd = to_device(dy, DType::BF16);
  const Tensor halod = to_device(halo, DType::BF16);
  auto y = poisoned_output({c.T, c.C}, DType::BF16);
  auto dx = poisoned_output({c.T, c.C}, DType::BF16);
  auto dhalo = poisoned_output({H, c.C}, DType::BF16);
  auto dw = to_guarded_device(dw_init, DType::F32);
  ops::short_conv_forward(test::gpu_ctx(), xd, wd, y->tensor(), halod);
  ops::short_conv_backward(test::gpu_ctx(), xd, wd, dyd, dx->tensor(), dw->tensor(), halod, dhalo->tensor());
  expect_close("y", to_host_f32(y->tensor()), y_ref, 1e-2);
  expect_close("dx", to_host_f32(dx->tensor()), dx_ref, 1e-2);
  if (H > 0) expect_close("dhalo", to_host_f32(dhalo->tensor()), dhalo_ref, 1e-2);
  expect_close("dw", to_host_f32(dw->tensor()), dw_ref, 1e-4);
  EXPECT_TRUE(y->guards_intact()) << "y written outside its bounds";
  EXPECT_TRUE(dx->guards_intact()) << "dx written outside its bounds";
  EXPECT_TRUE(dhalo->guards_intact()) << "dhalo written outside its bounds";
  EXPECT_TRUE(dw->guards_intact()) << "dw written outside its bounds";
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaShortConvHaloTest,
                         ::testing::Values(Case{2048, 4096, 4},  // a seed rank's chunk (TP4 SP of 8,192)
                                           Case{517, 67, 4},     // one-channel kernels, a partial channel tile
                                           Case{3, 40, 4},       // fewer positions than taps
                                           Case{2, 16, 4},       // a chunk shorter than the halo, 16-byte kernels
                                           Case{1000, 64, 1},    // one tap: an empty halo
                                           Case{300, 8, 8},      // the largest tap count
                                           Case{777, 72, 5}));   // 2-row backward slices

// One tensor of the op starts `misalign` bytes past a 16-byte boundary (the others aligned): x, y
// (forward) or dy, dx (backward) send the op to the one-channel kernels; dw misaligned by 4 bytes
// keeps the 16-byte kernels but adds its sums with 4-byte atomics.
struct MisalignCase {
  const char* tensor;
  size_t misalign;
};

void PrintTo(const MisalignCase& c, std::ostream* os) { *os << c.tensor << "_by_" << c.misalign; }

class CudaShortConvMisalignedTest : public ::testing::TestWithParam<MisalignCase> {};

TEST_P(CudaShortConvMisalignedTest, MatchesCpu) {
  QUILL_REQUIRE_GPU();
  const MisalignCase m = GetParam();
  const std::string which = m.tensor;
  auto off = [&](const char* name) { return which == name ? m.misalign : size_t{0}; };
  const int64_t T = 1100, C = 512, K = 4;
  const Tensor x = round_bf16(random_tensor({T, C}, DType::F32, 801));
  const Tensor w = random_tensor({C, K}, DType::F32, 802, 0.5);
  const Tensor dy = round_bf16(random_tensor({T, C}, DType::F32, 803));
  const Tensor dw_init = random_tensor({C, K}, DType::F32, 804, 0.5);
  Tensor y_ref = Tensor::empty({T, C}, DType::F32), dx_ref = Tensor::empty({T, C}, DType::F32);
  Tensor dw_ref = dw_init.clone();
  ops::short_conv_forward(DeviceContext::cpu(), x, w, y_ref);
  ops::short_conv_backward(DeviceContext::cpu(), x, w, dy, dx_ref, dw_ref);

  auto xd = to_guarded_device(x, DType::BF16, off("x"));
  auto dyd = to_guarded_device(dy, DType::BF16, off("dy"));
  auto y = poisoned_output({T, C}, DType::BF16, off("y"));
  auto dx = poisoned_output({T, C}, DType::BF16, off("dx"));
  auto dw = to_guarded_device(dw_init, DType::F32, off("dw"));
  const Tensor wd = to_device(w, DType::F32);
  ops::short_conv_forward(test::gpu_ctx(), xd->tensor(), wd, y->tensor());
  ops::short_conv_backward(test::gpu_ctx(), xd->tensor(), wd, dyd->tensor(), dx->tensor(), dw->tensor());
  expect_close("y", to_host_f32(y->tensor()), y_ref, 1e-2);
  expect_close("dx", to_host_f32(dx->tensor()), dx_ref, 1e-2);
  expect_close("dw", to_host_f32(dw->tensor()), dw_ref, 1e-4);
  EXPECT_TRUE(y->guards_intact()) << "y written outside its bounds";
  EXPECT_TRUE(dx->guards_intact()) << "dx written outside its bounds";
  EXPECT_TRUE(dw->guards_intact()) << "dw written outside its bounds";
}

INSTANTIATE_TEST_SUITE_P(Views, CudaShortConvMisalignedTest,
                         ::testing::Values(MisalignCase{"x", 2}, MisalignCase{"y", 8}, MisalignCase{"dy", 2},
                                           MisalignCase{"dx", 4}, MisalignCase{"dw", 4}, MisalignCase{"none", 0}));

// As in training (AttentionBlock::forward): the convolution reads what a cuBLASLt GEMM wrote into
// memory from the device allocator (never set by the host), at the slice's k/v shapes. Beside the
// comparison, this is the test that tells compute-sanitizer initcheck's reports on training apart
// (docs/determinism.md): reports here, where every element of x is a GEMM output, are about the
// GEMM's writes, not about reads of memory that nobody wrote.
TEST(CudaShortConv, ReadsWhatAGemmWrote) {
  QUILL_REQUIRE_GPU();
  const DeviceContext ctx = test::gpu_ctx();
  for (const int64_t T : {int64_t{128}, int64_t{8192}}) {
    SCOPED_TRACE("T " + std::to_string(T));
    const int64_t D = 2048, C = 1024, K = 4;
    const Tensor a = round_bf16(random_tensor({T, D}, DType::F32, 901));
    const Tensor wk = round_bf16(random_tensor({C, D}, DType::F32, 902, 0.02));
    const Tensor w = random_tensor({C, K}, DType::F32, 903, 0.5);
    Tensor x_ref = Tensor::empty({T, C}, DType::F32), y_ref = Tensor::empty({T, C}, DType::F32);
    ops::linear_forward(DeviceContext::cpu(), a, wk, x_ref);
    const Tensor x_bf16 = round_bf16(x_ref);
    ops::short_conv_forward(DeviceContext::cpu(), x_bf16, w, y_ref);

    const Tensor ad = to_device(a, DType::BF16), wkd = to_device(wk, DType::BF16), wd = to_device(w, DType::F32);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const Tensor x = Tensor::empty({T, C}, DType::BF16, *ctx.allocator);  // nothing but the GEMM writes it
    const Tensor y = Tensor::empty({T, C}, DType::BF16, *ctx.allocator);
    ops::linear_forward(ctx, ad, wkd, x);
    ops::short_conv_forward(ctx, x, wd, y);
    expect_close("x", to_host_f32(x), x_bf16, 1e-2);
    expect_close("y", to_host_f32(y), y_ref, 2e-2);
  }
}

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
