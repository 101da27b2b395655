// Short convolution CPU reference: hand values, finite-difference gradients in double (including a
// sequence shorter than the kernel, and with a halo), accumulate semantics, shape errors, float/double
// agreement, and the halo form against the convolution over [halo; chunk] bit for bit.
#include "ops/short_conv.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>

#include "base/error.h"
#include "util/test_util.h"

namespace quill {
namespace {

using test::dot;
using test::get;
using test::random_tensor;
using test::rel_l2;

const DeviceContext kCpu = DeviceContext::cpu();

Tensor from_values(const Shape& shape, std::initializer_list<double> values) {
  Tensor t = Tensor::empty(shape, DType::F64);
  int64_t i = 0;
  for (double v : values) test::set(t, i++, v);
  EXPECT_EQ(i, t.numel());
  return t;
}

TEST(ShortConvCpu, ForwardMatchesHandValues) {
  // Channel 0 taps [0.5, -1, 2]; channel 1 taps [1, 0, 0] (adds x two steps back).
  Tensor x = from_values({4, 2}, {1, 10, 2, 20, 3, 30, 4, 40});
  Tensor w = from_values({2, 3}, {0.5, -1, 2, 1, 0, 0});
  Tensor y = Tensor::empty({4, 2}, DType::F64);
  ops::short_conv_forward(kCpu, x, w, y);
  // y0[t] = x[t] + 0.5 x[t-2] - x[t-1] + 2 x[t]
  const double expect[] = {3, 10, 5, 20, 7.5, 40, 10, 60};
  for (int i = 0; i < 8; ++i) EXPECT_DOUBLE_EQ(get(y, i), expect[i]) << i;
}

void check_fd(int64_t T, int64_t C, int64_t K, uint64_t seed) {
  Tensor x = random_tensor({T, C}, DType::F64, seed);
  Tensor w = random_tensor({C, K}, DType::F64, seed + 1, 0.5);
  Tensor probe = random_tensor({T, C}, DType::F64, seed + 2);
  Tensor dx = Tensor::empty({T, C}, DType::F64), dw = Tensor::zeros({C, K}, DType::F64);
  ops::short_conv_backward(kCpu, x, w, probe, dx, dw);
  Tensor y = Tensor::empty({T, C}, DType::F64);
  auto loss = [&] {
    ops::short_conv_forward(kCpu, x, w, y);
    return dot(y, probe);
  };
  test::check_gradients(loss, {{"x", x, dx}, {"w", w, dw}}, 1e-6, 1e-6);
}

TEST(ShortConvCpu, GradientsMatchFiniteDifferences) { check_fd(7, 6, 3, 100); }
TEST(ShortConvCpu, GradientsMatchFiniteDifferencesWhenSequenceShorterThanKernel) { check_fd(2, 5, 4, 200); }
TEST(ShortConvCpu, GradientsMatchFiniteDifferencesSingleTap) { check_fd(5, 3, 1, 300); }

// With a halo: the gradients of x, w and the halo (dhalo) by finite differences.
void check_fd_with_halo(int64_t T, int64_t C, int64_t K, uint64_t seed) {
  Tensor x = random_tensor({T, C}, DType::F64, seed);
  Tensor halo = random_tensor({K - 1, C}, DType::F64, seed + 3);
  Tensor w = random_tensor({C, K}, DType::F64, seed + 1, 0.5);
  Tensor probe = random_tensor({T, C}, DType::F64, seed + 2);
  Tensor dx = Tensor::empty({T, C}, DType::F64), dw = Tensor::zeros({C, K}, DType::F64);
  Tensor dhalo = Tensor::empty({K - 1, C}, DType::F64);
  ops::short_conv_backward(kCpu, x, w, probe, dx, dw, halo, dhalo);
  Tensor y = Tensor::empty({T, C}, DType::F64);
  auto loss = [&] {
    ops::short_conv_forward(kCpu, x, w, y, halo);
    return dot(y, probe);
  };
  test::check_gradients(loss, {{"x", x, dx}, {"w", w, dw}, {"halo", halo, dhalo}}, 1e-6, 1e-6);
}

TEST(ShortConvCpu, GradientsWithAHaloMatchFiniteDifferences) {
  check_fd_with_halo(7, 6, 4, 400);
  check_fd_with_halo(2, 5, 4, 500);  // a chunk shorter than the halo
  check_fd_with_halo(5, 3, 2, 600);
}

// The halo form is the convolution over [halo; chunk] keeping the chunk's outputs, with no gradient into the
// halo rows' outputs: y, dx, dhalo and dw the same bits (fp32), halo rows of zeros included (position 0).
TEST(ShortConvCpu, HaloEqualsTheConvolutionOverHaloAndChunk) {
  for (const auto& [T, K] : {std::pair<int64_t, int64_t>{9, 4}, {2, 4}, {6, 2}, {5, 1}}) {
    SCOPED_TRACE("T " + std::to_string(T) + " K " + std::to_string(K));
    const int64_t C = 5, H = K - 1;
    const Tensor x = random_tensor({T, C}, DType::F32, 11), w = random_tensor({C, K}, DType::F32, 12, 0.5);
    const Tensor dy = random_tensor({T, C}, DType::F32, 13);
    Tensor halo = random_tensor({H, C}, DType::F32, 14);
    if (H > 1) std::fill_n(halo.data_as<float>(), C, 0.0f);  // a first halo row before the sequence: zeros
    Tensor ext = Tensor::empty({H + T, C}, DType::F32), dy_ext = Tensor::zeros({H + T, C}, DType::F32);
    std::copy_n(halo.data_as<float>(), H * C, ext.data_as<float>());
    std::copy_n(x.data_as<float>(), T * C, ext.data_as<float>() + H * C);
    std::copy_n(dy.data_as<float>(), T * C, dy_ext.data_as<float>() + H * C);
    Tensor y_ext = Tensor::empty({H + T, C}, DType::F32), dx_ext = Tensor::empty({H + T, C}, DType::F32);
    Tensor dw_ext = Tensor::zeros({C, K}, DType::F32);
    ops::short_conv_forward(kCpu, ext, w, y_ext);
    ops::short_conv_backward(kCpu, ext, w, dy_ext, dx_ext, dw_ext);

    Tensor y = Tensor::empty({T, C}, DType::F32), dx = Tensor::empty({T, C}, DType::F32);
    Tensor dhalo = Tensor::empty({H, C}, DType::F32), dw = Tensor::zeros({C, K}, DType::F32);
    ops::short_conv_forward(kCpu, x, w, y, halo);
    ops::short_conv_backward(kCpu, x, w, dy, dx, dw, halo, dhalo);
    for (int64_t i = 0; i < T * C; ++i) {
      ASSERT_EQ(y.data_as<float>()[i], y_ext.data_as<float>()[H * C + i]) << "y " << i;
      ASSERT_EQ(dx.data_as<float>()[i], dx_ext.data_as<float>()[H * C + i]) << "dx " << i;
    }
    for (int64_t i = 0; i < H * C; ++i) ASSERT_EQ(dhalo.data_as<float>()[i], dx_ext.data_as<float>()[i]) << "dhalo " << i;
    for (int64_t i = 0; i < C * K; ++i) ASSERT_EQ(dw.data_as<float>()[i], dw_ext.data_as<float>()[i]) << "dw " << i;
  }
}

TEST(ShortConvCpu, BackwardOverwritesDxAndAccumulatesDw) {
  const int64_t T = 7, C = 6, K = 3;
  Tensor x = random_tensor({T, C}, DType::F64, 1);
  Tensor w = random_tensor({C, K}, DType::F64, 2);
  Tensor dy = random_tensor({T, C}, DType::F64, 3);
  Tensor dx_ref = Tensor::zeros({T, C}, DType::F64), dw_ref = Tensor::zeros({C, K}, DType::F64);
  ops::short_conv_backward(kCpu, x, w, dy, dx_ref, dw_ref);
  Tensor dx = random_tensor({T, C}, DType::F64, 4);
  Tensor dw_old = random_tensor({C, K}, DType::F64, 5);
  Tensor dw = dw_old.clone();
  ops::short_conv_backward(kCpu, x, w, dy, dx, dw);
  EXPECT_EQ(rel_l2(dx, dx_ref), 0.0);
  for (int64_t i = 0; i < C * K; ++i) EXPECT_NEAR(get(dw, i), get(dw_old, i) + get(dw_ref, i), 1e-12) << i;
}

TEST(ShortConvCpu, FloatAgreesWithDouble) {
  const int64_t T = 11, C = 9, K = 4;
  Tensor x = random_tensor({T, C}, DType::F64, 7);
  Tensor w = random_tensor({C, K}, DType::F64, 8);
  Tensor dy = random_tensor({T, C}, DType::F64, 9);
  auto run = [&](DType dt, Tensor& y, Tensor& dx, Tensor& dw) {
    Tensor xc = convert_dtype(x, dt), wc = convert_dtype(w, dt), dyc = convert_dtype(dy, dt);
    y = Tensor::empty({T, C}, dt);
    dx = Tensor::empty({T, C}, dt);
    dw = Tensor::zeros({C, K}, dt);
    ops::short_conv_forward(kCpu, xc, wc, y);
    ops::short_conv_backward(kCpu, xc, wc, dyc, dx, dw);
  };
  Tensor y64, dx64, dw64, y32, dx32, dw32;
  run(DType::F64, y64, dx64, dw64);
  run(DType::F32, y32, dx32, dw32);
  EXPECT_LE(rel_l2(y32, y64), 1e-5);
  EXPECT_LE(rel_l2(dx32, dx64), 1e-5);
  EXPECT_LE(rel_l2(dw32, dw64), 1e-5);
}

TEST(ShortConvCpu, RejectsBadShapesAndAliasing) {
  Tensor x = random_tensor({5, 4}, DType::F32, 1);
  Tensor w = random_tensor({4, 3}, DType::F32, 2);
  Tensor y = Tensor::empty({5, 4}, DType::F32);
  EXPECT_THROW(ops::short_conv_forward(kCpu, x, Tensor::empty({3, 3}, DType::F32), y), Error);
  EXPECT_THROW(ops::short_conv_forward(kCpu, x, w.reshape({4, 1, 3}), y), Error);
  EXPECT_THROW(ops::short_conv_forward(kCpu, x, w, Tensor::empty({4, 4}, DType::F32)), Error);
  EXPECT_THROW(ops::short_conv_forward(kCpu, x, Tensor::empty({4, 0}, DType::F32), y), Error);
  EXPECT_THROW(ops::short_conv_forward(kCpu, x, convert_dtype(w, DType::F64), y), Error);
  EXPECT_THROW(ops::short_conv_forward(kCpu, x, w, x), Error);
  Tensor dx = Tensor::empty({5, 4}, DType::F32), dw = Tensor::zeros({4, 3}, DType::F32);
  EXPECT_THROW(ops::short_conv_backward(kCpu, x, w, y, dx, Tensor::zeros({4, 2}, DType::F32)), Error);
  EXPECT_THROW(ops::short_conv_backward(kCpu, x, w, y, Tensor::empty({5, 3}, DType::F32), dw), Error);
  EXPECT_THROW(ops::short_conv_backward(kCpu, x, w, y, y, dw), Error);
  // A halo of K-1 rows of x's width and dtype, and its gradient exactly when it is given.
  const Tensor halo = random_tensor({2, 4}, DType::F32, 3);
  Tensor dhalo = Tensor::empty({2, 4}, DType::F32);
  EXPECT_THROW(ops::short_conv_forward(kCpu, x, w, y, Tensor::empty({3, 4}, DType::F32)), Error);
  EXPECT_THROW(ops::short_conv_forward(kCpu, x, w, y, Tensor::empty({2, 5}, DType::F32)), Error);
  EXPECT_THROW(ops::short_conv_forward(kCpu, x, w, y, Tensor::empty({2, 4}, DType::F64)), Error);
  EXPECT_THROW(ops::short_conv_backward(kCpu, x, w, y, dx, dw, halo, Tensor()), Error);
  EXPECT_THROW(ops::short_conv_backward(kCpu, x, w, y, dx, dw, Tensor(), dhalo), Error);
  EXPECT_THROW(ops::short_conv_backward(kCpu, x, w, y, dx, dw, halo, Tensor::empty({1, 4}, DType::F32)), Error);
  EXPECT_THROW(ops::short_conv_backward(kCpu, x, w, y, dx, dw, halo, halo), Error);
  EXPECT_THROW(ops::short_conv_forward(kCpu, x, w, y, y.rows(0, 2)), Error);  // y must not alias the halo
}

}  // namespace
}  // namespace quill
