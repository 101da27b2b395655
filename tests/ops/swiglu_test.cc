// SwiGLU CPU reference: values against an independent formula (and hand values), finite-difference
// gradients in double, overwrite semantics, shape errors, float/double agreement.
#include "ops/swiglu.h"

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

TEST(SwigluCpu, ForwardMatchesHandValues) {
  // One row, F = 3: gates [0, 1, -2] in columns 0..2, ups [5, 2, 3] in columns 3..5.
  Tensor h = Tensor::empty({1, 6}, DType::F64);
  const double hv[] = {0, 1, -2, 5, 2, 3};
  for (int i = 0; i < 6; ++i) test::set(h, i, hv[i]);
  Tensor a = Tensor::empty({1, 3}, DType::F64);
  ops::swiglu_forward(kCpu, h, a);
  EXPECT_DOUBLE_EQ(get(a, 0), 0.0);
  EXPECT_NEAR(get(a, 1), 2 * 0.7310585786300049, 1e-15);         // silu(1) = sigmoid(1)
  EXPECT_NEAR(get(a, 2), 3 * -2 * 0.11920292202211755, 1e-15);   // silu(-2) = -2 sigmoid(-2)
}

TEST(SwigluCpu, ForwardMatchesFormulaOnRandomRows) {
  const int64_t N = 7, F = 5;
  Tensor h = random_tensor({N, 2 * F}, DType::F64, 1, 3.0);
  Tensor a = Tensor::empty({N, F}, DType::F64);
  ops::swiglu_forward(kCpu, h, a);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t f = 0; f < F; ++f) {
      const double g = get(h, n * 2 * F + f), u = get(h, n * 2 * F + F + f);
      EXPECT_NEAR(get(a, n * F + f), g / (1 + std::exp(-g)) * u, 1e-14) << n << "," << f;
    }
}

TEST(SwigluCpu, GradientsMatchFiniteDifferences) {
  const int64_t N = 7, F = 5;
  Tensor h = random_tensor({N, 2 * F}, DType::F64, 11, 2.0);
  Tensor probe = random_tensor({N, F}, DType::F64, 12);
  Tensor dh = random_tensor({N, 2 * F}, DType::F64, 13);  // garbage: overwritten
  ops::swiglu_backward(kCpu, h, probe, dh);
  Tensor a = Tensor::empty({N, F}, DType::F64);
  auto loss = [&] {
    ops::swiglu_forward(kCpu, h, a);
    return dot(a, probe);
  };
  test::check_gradients(loss, {{"h", h, dh}}, 1e-6, 1e-6);
}

TEST(SwigluCpu, SaturatedGatesStayFinite) {
  Tensor h = Tensor::empty({1, 4}, DType::F32);
  const double hv[] = {-1000, 1000, 2, 3};
  for (int i = 0; i < 4; ++i) test::set(h, i, hv[i]);
  Tensor a = Tensor::empty({1, 2}, DType::F32), da = Tensor::empty({1, 2}, DType::F32);
  test::set(da, 0, 1.0);
  test::set(da, 1, 1.0);
  Tensor dh = Tensor::empty({1, 4}, DType::F32);
  ops::swiglu_forward(kCpu, h, a);
  ops::swiglu_backward(kCpu, h, da, dh);
  EXPECT_EQ(get(a, 0), 0.0);
  EXPECT_FLOAT_EQ(get(a, 1), 3000.0f);
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(std::isfinite(get(dh, i))) << i;
  EXPECT_FLOAT_EQ(get(dh, 1), 3.0f);  // d silu / dg -> 1 for large g
}

TEST(SwigluCpu, FloatAgreesWithDouble) {
  const int64_t N = 13, F = 11;
  Tensor h = random_tensor({N, 2 * F}, DType::F64, 21, 2.0);
  Tensor da = random_tensor({N, F}, DType::F64, 22);
  auto run = [&](DType dt, Tensor& a, Tensor& dh) {
    Tensor hc = convert_dtype(h, dt), dac = convert_dtype(da, dt);
    a = Tensor::empty({N, F}, dt);
    dh = Tensor::empty({N, 2 * F}, dt);
    ops::swiglu_forward(kCpu, hc, a);
    ops::swiglu_backward(kCpu, hc, dac, dh);
  };
  Tensor a64, dh64, a32, dh32;
  run(DType::F64, a64, dh64);
  run(DType::F32, a32, dh32);
  EXPECT_LE(rel_l2(a32, a64), 1e-5);
  EXPECT_LE(rel_l2(dh32, dh64), 1e-5);
}

TEST(SwigluCpu, RejectsBadShapesAndDtypes) {
  Tensor h = random_tensor({4, 6}, DType::F32, 1);
  EXPECT_THROW(ops::swiglu_forward(kCpu, h, Tensor::empty({4, 6}, DType::F32)), Error);
  EXPECT_THROW(ops::swiglu_forward(kCpu, h, Tensor::empty({4, 3}, DType::F64)), Error);
  EXPECT_THROW(ops::swiglu_forward(kCpu, random_tensor({4, 5}, DType::F32, 2), Tensor::empty({4, 2}, DType::F32)),
               Error);
  EXPECT_THROW(ops::swiglu_backward(kCpu, h, Tensor::empty({4, 3}, DType::F32), Tensor::empty({4, 3}, DType::F32)),
               Error);
  EXPECT_THROW(ops::swiglu_backward(kCpu, h, Tensor::empty({3, 3}, DType::F32), Tensor::empty({4, 6}, DType::F32)),
               Error);
}

}  // namespace
}  // namespace quill
