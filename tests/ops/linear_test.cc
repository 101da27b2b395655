// Linear CPU reference: hand values, an independent naive product on sizes that cross the row
// blocking, finite-difference gradients in double, accumulate semantics, shape errors, float/double.
#include "ops/linear.h"

#include <gtest/gtest.h>

#include "base/error.h"
#include "util/test_util.h"

namespace quill {
namespace {

using test::dot;
using test::get;
using test::random_tensor;
using test::rel_l2;

const DeviceContext kCpu = DeviceContext::cpu();

TEST(LinearCpu, ForwardMatchesHandValues) {
  Tensor x = Tensor::empty({2, 3}, DType::F64), w = Tensor::empty({2, 3}, DType::F64);
  const double xv[] = {1, 2, 3, -1, 0.5, 4};
  const double wv[] = {2, 0, -1, 1, 1, 1};
  for (int i = 0; i < 6; ++i) {
    test::set(x, i, xv[i]);
    test::set(w, i, wv[i]);
  }
  Tensor y = Tensor::empty({2, 2}, DType::F64);
  ops::linear_forward(kCpu, x, w, y);
  // y = x w^T: [[2 - 3, 1 + 2 + 3], [-2 - 4, -1 + 0.5 + 4]]
  EXPECT_DOUBLE_EQ(get(y, 0), -1);
  EXPECT_DOUBLE_EQ(get(y, 1), 6);
  EXPECT_DOUBLE_EQ(get(y, 2), -6);
  EXPECT_DOUBLE_EQ(get(y, 3), 3.5);
}

// y = x w^T, dx = dy w, dw = dy^T x written as the plainest triple loops.
TEST(LinearCpu, MatchesNaiveProductsAcrossRowBlocks) {
  const int64_t N = 130, K = 17, M = 23;
  Tensor x = random_tensor({N, K}, DType::F64, 1);
  Tensor w = random_tensor({M, K}, DType::F64, 2);
  Tensor dy = random_tensor({N, M}, DType::F64, 3);
  Tensor y = Tensor::empty({N, M}, DType::F64), dx = Tensor::empty({N, K}, DType::F64);
  Tensor dw = Tensor::zeros({M, K}, DType::F64);
  ops::linear_forward(kCpu, x, w, y);
  ops::linear_backward_input(kCpu, dy, w, dx);
  ops::linear_backward_weight(kCpu, dy, x, dw);
  Tensor y_ref = Tensor::zeros({N, M}, DType::F64), dx_ref = Tensor::zeros({N, K}, DType::F64);
  Tensor dw_ref = Tensor::zeros({M, K}, DType::F64);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t k = 0; k < K; ++k) {
        test::set(y_ref, n * M + m, get(y_ref, n * M + m) + get(x, n * K + k) * get(w, m * K + k));
        test::set(dx_ref, n * K + k, get(dx_ref, n * K + k) + get(dy, n * M + m) * get(w, m * K + k));
        test::set(dw_ref, m * K + k, get(dw_ref, m * K + k) + get(dy, n * M + m) * get(x, n * K + k));
      }
  EXPECT_LE(rel_l2(y, y_ref), 1e-13);
  EXPECT_LE(rel_l2(dx, dx_ref), 1e-13);
  EXPECT_LE(rel_l2(dw, dw_ref), 1e-13);
}

TEST(LinearCpu, GradientsMatchFiniteDifferences) {
  const int64_t N = 7, K = 5, M = 6;
  Tensor x = random_tensor({N, K}, DType::F64, 11);
  Tensor w = random_tensor({M, K}, DType::F64, 12);
  Tensor probe = random_tensor({N, M}, DType::F64, 13);
  Tensor dx = Tensor::empty({N, K}, DType::F64), dw = Tensor::zeros({M, K}, DType::F64);
  ops::linear_backward_input(kCpu, probe, w, dx);
  ops::linear_backward_weight(kCpu, probe, x, dw);
  Tensor y = Tensor::empty({N, M}, DType::F64);
  auto loss = [&] {
    ops::linear_forward(kCpu, x, w, y);
    return dot(y, probe);
  };
  test::check_gradients(loss, {{"x", x, dx}, {"w", w, dw}}, 1e-6, 1e-6);
}

TEST(LinearCpu, AccumulateSemantics) {
  const int64_t N = 7, K = 5, M = 6;
  Tensor x = random_tensor({N, K}, DType::F64, 21);
  Tensor w = random_tensor({M, K}, DType::F64, 22);
  Tensor dy = random_tensor({N, M}, DType::F64, 23);
  Tensor dx_ref = Tensor::zeros({N, K}, DType::F64), dw_ref = Tensor::zeros({M, K}, DType::F64);
  ops::linear_backward_input(kCpu, dy, w, dx_ref);
  ops::linear_backward_weight(kCpu, dy, x, dw_ref);

  Tensor old_dx = random_tensor({N, K}, DType::F64, 24);
  Tensor dx = old_dx.clone();
  ops::linear_backward_input(kCpu, dy, w, dx, /*accumulate=*/false);  // overwrites
  EXPECT_EQ(rel_l2(dx, dx_ref), 0.0);
  dx = old_dx.clone();
  ops::linear_backward_input(kCpu, dy, w, dx, /*accumulate=*/true);  // adds
  for (int64_t i = 0; i < N * K; ++i) EXPECT_NEAR(get(dx, i), get(old_dx, i) + get(dx_ref, i), 1e-12) << i;

  Tensor old_dw = random_tensor({M, K}, DType::F64, 25);
  Tensor dw = old_dw.clone();
  ops::linear_backward_weight(kCpu, dy, x, dw);  // always adds
  for (int64_t i = 0; i < M * K; ++i) EXPECT_NEAR(get(dw, i), get(old_dw, i) + get(dw_ref, i), 1e-12) << i;
}

TEST(LinearCpu, FloatAgreesWithDouble) {
  const int64_t N = 37, K = 29, M = 19;
  Tensor x = random_tensor({N, K}, DType::F64, 31);
  Tensor w = random_tensor({M, K}, DType::F64, 32);
  Tensor dy = random_tensor({N, M}, DType::F64, 33);
  auto run = [&](DType dt, Tensor& y, Tensor& dx, Tensor& dw) {
    Tensor xc = convert_dtype(x, dt), wc = convert_dtype(w, dt), dyc = convert_dtype(dy, dt);
    y = Tensor::empty({N, M}, dt);
    dx = Tensor::empty({N, K}, dt);
    dw = Tensor::zeros({M, K}, dt);
    ops::linear_forward(kCpu, xc, wc, y);
    ops::linear_backward_input(kCpu, dyc, wc, dx);
    ops::linear_backward_weight(kCpu, dyc, xc, dw);
  };
  Tensor y64, dx64, dw64, y32, dx32, dw32;
  run(DType::F64, y64, dx64, dw64);
  run(DType::F32, y32, dx32, dw32);
  EXPECT_LE(rel_l2(y32, y64), 1e-5);
  EXPECT_LE(rel_l2(dx32, dx64), 1e-5);
  EXPECT_LE(rel_l2(dw32, dw64), 1e-5);
}

TEST(LinearCpu, RejectsBadShapesAndDtypes) {
  Tensor x = random_tensor({4, 5}, DType::F32, 1);
  Tensor w = random_tensor({3, 5}, DType::F32, 2);
  Tensor y = Tensor::empty({4, 3}, DType::F32);
  EXPECT_THROW(ops::linear_forward(kCpu, x, Tensor::empty({3, 6}, DType::F32), y), Error);
  EXPECT_THROW(ops::linear_forward(kCpu, x, w, Tensor::empty({4, 4}, DType::F32)), Error);
  EXPECT_THROW(ops::linear_forward(kCpu, x, w, Tensor::empty({4, 3}, DType::F64)), Error);
  EXPECT_THROW(ops::linear_forward(kCpu, x.reshape({20}), w, y), Error);
  EXPECT_THROW(ops::linear_backward_input(kCpu, y, w, Tensor::empty({4, 6}, DType::F32)), Error);
  EXPECT_THROW(ops::linear_backward_input(kCpu, Tensor::empty({4, 2}, DType::F32), w, x), Error);
  EXPECT_THROW(ops::linear_backward_weight(kCpu, y, Tensor::empty({5, 5}, DType::F32), w), Error);
  EXPECT_THROW(ops::linear_backward_weight(kCpu, y, x, Tensor::zeros({3, 4}, DType::F32)), Error);
  try {
    ops::linear_forward(kCpu, x, Tensor::empty({3, 6}, DType::F32), y);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("linear_forward: w has shape [3, 6], expected [3, 5]"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace quill
