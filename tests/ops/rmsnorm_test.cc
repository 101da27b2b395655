// RMSNorm CPU reference: hand values, finite-difference gradients in double, accumulate semantics,
// shape errors, and float/double agreement.
#include "ops/rmsnorm.h"

#include <gtest/gtest.h>

#include <cmath>

#include "base/error.h"
#include "util/test_util.h"

namespace quill {
namespace {

using test::dot;
using test::get;
using test::random_tensor;
using test::rel_l2;

const DeviceContext kCpu = DeviceContext::cpu();

TEST(RmsNormCpu, ForwardMatchesHandValues) {
  Tensor x = Tensor::empty({2, 4}, DType::F64);
  Tensor w = Tensor::empty({4}, DType::F64);
  const double xv[] = {1, 2, 3, 4, -0.5, 0.25, 2, -3};
  const double wv[] = {1, 0.5, 2, -1};
  for (int i = 0; i < 8; ++i) test::set(x, i, xv[i]);
  for (int i = 0; i < 4; ++i) test::set(w, i, wv[i]);
  const double eps = 1e-3;
  Tensor y = Tensor::empty({2, 4}, DType::F64), rstd = Tensor::empty({2}, DType::F64);
  ops::rmsnorm_forward(kCpu, x, w, eps, y, rstd);
  // Row 0: mean(x^2) = 30 / 4 = 7.5.  Row 1: (0.25 + 0.0625 + 4 + 9) / 4 = 3.328125.
  const double r0 = 1 / std::sqrt(7.5 + eps), r1 = 1 / std::sqrt(3.328125 + eps);
  EXPECT_NEAR(get(rstd, 0), r0, 1e-14);
  EXPECT_NEAR(get(rstd, 1), r1, 1e-14);
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(get(y, i), wv[i % 4] * xv[i] * (i < 4 ? r0 : r1), 1e-14) << i;
}

TEST(RmsNormCpu, ForwardMayWriteInPlace) {
  Tensor x = random_tensor({3, 5}, DType::F64, 1);
  Tensor w = random_tensor({5}, DType::F64, 2);
  Tensor y = Tensor::empty({3, 5}, DType::F64), rstd = Tensor::empty({3}, DType::F64);
  ops::rmsnorm_forward(kCpu, x, w, 1e-6, y, rstd);
  ops::rmsnorm_forward(kCpu, x, w, 1e-6, x, rstd);
  EXPECT_EQ(rel_l2(x, y), 0.0);
}

TEST(RmsNormCpu, GradientsMatchFiniteDifferences) {
  const int64_t N = 7, D = 5;
  const double eps = 1e-5;
  Tensor x = random_tensor({N, D}, DType::F64, 11);
  Tensor w = random_tensor({D}, DType::F64, 12);
  test::fill_normal(w, 12, 0.5, 1.0);  // weights near 1, none zero
  Tensor probe = random_tensor({N, D}, DType::F64, 13);
  Tensor y = Tensor::empty({N, D}, DType::F64), rstd = Tensor::empty({N}, DType::F64);
  ops::rmsnorm_forward(kCpu, x, w, eps, y, rstd);
  Tensor dx = Tensor::empty({N, D}, DType::F64), dw = Tensor::zeros({D}, DType::F64);
  ops::rmsnorm_backward(kCpu, x, w, rstd, probe, dx, dw);
  Tensor y2 = Tensor::empty({N, D}, DType::F64), rstd2 = Tensor::empty({N}, DType::F64);
  auto loss = [&] {
    ops::rmsnorm_forward(kCpu, x, w, eps, y2, rstd2);
    return dot(y2, probe);
  };
  test::check_gradients(loss, {{"x", x, dx}, {"w", w, dw}}, 1e-6, 1e-6);
}

TEST(RmsNormCpu, BackwardOverwritesDxAndAccumulatesDw) {
  const int64_t N = 7, D = 5;
  Tensor x = random_tensor({N, D}, DType::F64, 21);
  Tensor w = random_tensor({D}, DType::F64, 22);
  Tensor dy = random_tensor({N, D}, DType::F64, 23);
  Tensor y = Tensor::empty({N, D}, DType::F64), rstd = Tensor::empty({N}, DType::F64);
  ops::rmsnorm_forward(kCpu, x, w, 1e-6, y, rstd);
  Tensor dx_ref = Tensor::zeros({N, D}, DType::F64), dw_ref = Tensor::zeros({D}, DType::F64);
  ops::rmsnorm_backward(kCpu, x, w, rstd, dy, dx_ref, dw_ref);
  Tensor dx = random_tensor({N, D}, DType::F64, 24);  // garbage: must be overwritten
  Tensor dw_old = random_tensor({D}, DType::F64, 25);
  Tensor dw = dw_old.clone();
  ops::rmsnorm_backward(kCpu, x, w, rstd, dy, dx, dw);
  EXPECT_EQ(rel_l2(dx, dx_ref), 0.0);
  for (int64_t d = 0; d < D; ++d) EXPECT_NEAR(get(dw, d), get(dw_old, d) + get(dw_ref, d), 1e-12) << d;
}

TEST(RmsNormCpu, FloatAgreesWithDouble) {
  const int64_t N = 9, D = 13;
  Tensor x = random_tensor({N, D}, DType::F64, 31, 3.0);
  Tensor w = random_tensor({D}, DType::F64, 32);
  Tensor dy = random_tensor({N, D}, DType::F64, 33);
  auto run = [&](DType dt, Tensor& y, Tensor& dx, Tensor& dw) {
    Tensor xc = convert_dtype(x, dt), wc = convert_dtype(w, dt), dyc = convert_dtype(dy, dt);
    y = Tensor::empty({N, D}, dt);
    Tensor rstd = Tensor::empty({N}, dt);
    dx = Tensor::empty({N, D}, dt);
    dw = Tensor::zeros({D}, dt);
    ops::rmsnorm_forward(kCpu, xc, wc, 1e-6, y, rstd);
    ops::rmsnorm_backward(kCpu, xc, wc, rstd, dyc, dx, dw);
  };
  Tensor y64, dx64, dw64, y32, dx32, dw32;
  run(DType::F64, y64, dx64, dw64);
  run(DType::F32, y32, dx32, dw32);
  EXPECT_LE(rel_l2(y32, y64), 1e-5);
  EXPECT_LE(rel_l2(dx32, dx64), 1e-5);
  EXPECT_LE(rel_l2(dw32, dw64), 1e-5);
}

TEST(RmsNormCpu, RejectsBadShapesAndDtypes) {
  Tensor x = random_tensor({4, 6}, DType::F32, 41);
  Tensor w = random_tensor({6}, DType::F32, 42);
  Tensor y = Tensor::empty({4, 6}, DType::F32), rstd = Tensor::empty({4}, DType::F32);
  EXPECT_THROW(ops::rmsnorm_forward(kCpu, x, Tensor::empty({5}, DType::F32), 1e-6, y, rstd), Error);
  EXPECT_THROW(ops::rmsnorm_forward(kCpu, x, w, 1e-6, Tensor::empty({4, 5}, DType::F32), rstd), Error);
  EXPECT_THROW(ops::rmsnorm_forward(kCpu, x, w, 1e-6, y, Tensor::empty({3}, DType::F32)), Error);
  EXPECT_THROW(ops::rmsnorm_forward(kCpu, x, convert_dtype(w, DType::F64), 1e-6, y, rstd), Error);
  EXPECT_THROW(ops::rmsnorm_forward(kCpu, x.reshape({24}), w, 1e-6, y, rstd), Error);
  EXPECT_THROW(ops::rmsnorm_forward(kCpu, convert_dtype(x, DType::BF16), convert_dtype(w, DType::BF16), 1e-6,
                                    Tensor::empty({4, 6}, DType::BF16), Tensor::empty({4}, DType::BF16)),
               Error);
  Tensor dx = Tensor::empty({4, 6}, DType::F32), dw = Tensor::zeros({6}, DType::F32);
  EXPECT_THROW(ops::rmsnorm_backward(kCpu, x, w, rstd, y, dx, Tensor::zeros({7}, DType::F32)), Error);
  EXPECT_THROW(ops::rmsnorm_backward(kCpu, x, w, rstd, Tensor::empty({4, 7}, DType::F32), dx, dw), Error);
  DeviceContext gpu;
  gpu.device = Device::CUDA;
  EXPECT_THROW(ops::rmsnorm_forward(gpu, x, w, 1e-6, y, rstd), Error);
  try {
    ops::rmsnorm_forward(kCpu, x, w, 1e-6, y, Tensor::empty({3}, DType::F32));
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rmsnorm_forward: rstd"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace quill
