// Element-wise CPU reference: values, finite-difference gradients of scale_by_scalar and scale_rows
// in double, overwrite/accumulate semantics, shape errors, float/double agreement.
#include "ops/elementwise.h"

#include <gtest/gtest.h>

#include <vector>

#include "base/error.h"
#include "util/test_util.h"

namespace quill {
namespace {

using test::dot;
using test::get;
using test::random_tensor;
using test::rel_l2;

const DeviceContext kCpu = DeviceContext::cpu();

TEST(ElementwiseCpu, CopyAddScaleAndSumSquares) {
  Tensor x = random_tensor({7, 5}, DType::F64, 1);
  Tensor y = random_tensor({7, 5}, DType::F64, 2);
  Tensor y0 = y.clone();
  ops::add_inplace(kCpu, y, x);
  for (int64_t i = 0; i < 35; ++i) EXPECT_EQ(get(y, i), get(y0, i) + get(x, i)) << i;
  ops::scale_inplace(kCpu, y, -0.5);
  for (int64_t i = 0; i < 35; ++i) EXPECT_EQ(get(y, i), (get(y0, i) + get(x, i)) * -0.5) << i;
  Tensor z = Tensor::empty({7, 5}, DType::F64);
  ops::copy(kCpu, x, z);
  EXPECT_EQ(rel_l2(z, x), 0.0);
  Tensor ids = Tensor::empty({3}, DType::I32), ids2 = Tensor::empty({3}, DType::I32);  // copy takes any dtype
  for (int i = 0; i < 3; ++i) ids.data_as<int32_t>()[i] = 7 * i - 2;
  ops::copy(kCpu, ids, ids2);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(ids2.data_as<int32_t>()[i], 7 * i - 2);
  Tensor v = Tensor::empty({3}, DType::F32);
  test::set(v, 0, 1);
  test::set(v, 1, -2);
  test::set(v, 2, 3);
  EXPECT_EQ(ops::sum_squares(kCpu, v), 14.0);
  EXPECT_NEAR(ops::sum_squares(kCpu, x), dot(x, x), 1e-12);
}

TEST(ElementwiseCpu, ScaleByScalarGradients) {
  const int64_t N = 7, D = 5;
  Tensor x = random_tensor({N, D}, DType::F64, 11);
  Tensor s = Tensor::empty({1}, DType::F64);
  test::set(s, 0, -1.7);
  Tensor probe = random_tensor({N, D}, DType::F64, 12);
  Tensor y = Tensor::empty({N, D}, DType::F64);
  ops::scale_by_scalar(kCpu, x, s, y);
  for (int64_t i = 0; i < N * D; ++i) EXPECT_EQ(get(y, i), get(x, i) * -1.7) << i;
  Tensor dx = random_tensor({N, D}, DType::F64, 13);  // garbage: overwritten
  Tensor ds = Tensor::zeros({1}, DType::F64);
  ops::scale_by_scalar_backward(kCpu, x, s, probe, dx, ds);
  auto loss = [&] {
    ops::scale_by_scalar(kCpu, x, s, y);
    return dot(y, probe);
  };
  test::check_gradients(loss, {{"x", x, dx}, {"s", s, ds}}, 1e-6, 1e-6);
  // ds accumulates.
  const double first = get(ds, 0);
  ops::scale_by_scalar_backward(kCpu, x, s, probe, dx, ds);
  EXPECT_NEAR(get(ds, 0), 2 * first, 1e-12);
}

TEST(ElementwiseCpu, ScaleRowsGradients) {
  const int64_t N = 7, D = 5;
  Tensor x = random_tensor({N, D}, DType::F64, 21);
  Tensor s = random_tensor({N}, DType::F64, 22);
  Tensor probe = random_tensor({N, D}, DType::F64, 23);
  Tensor y = Tensor::empty({N, D}, DType::F64);
  ops::scale_rows(kCpu, x, s, y);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t d = 0; d < D; ++d) EXPECT_EQ(get(y, n * D + d), get(x, n * D + d) * get(s, n));
  Tensor dx = random_tensor({N, D}, DType::F64, 24);  // garbage: overwritten
  Tensor ds = random_tensor({N}, DType::F64, 25);     // garbage: overwritten
  ops::scale_rows_backward(kCpu, x, s, probe, dx, ds);
  auto loss = [&] {
    ops::scale_rows(kCpu, x, s, y);
    return dot(y, probe);
  };
  test::check_gradients(loss, {{"x", x, dx}, {"s", s, ds}}, 1e-6, 1e-6);
}

TEST(ElementwiseCpu, FloatAgreesWithDouble) {
  const int64_t N = 9, D = 13;
  Tensor x = random_tensor({N, D}, DType::F64, 31);
  Tensor s = random_tensor({N}, DType::F64, 32);
  Tensor s1 = random_tensor({1}, DType::F64, 33);
  Tensor dy = random_tensor({N, D}, DType::F64, 34);
  auto run = [&](DType dt, std::vector<Tensor>& outs) {
    Tensor xc = convert_dtype(x, dt), sc = convert_dtype(s, dt), s1c = convert_dtype(s1, dt);
    Tensor dyc = convert_dtype(dy, dt);
    Tensor y = Tensor::empty({N, D}, dt), dx = Tensor::empty({N, D}, dt), ds = Tensor::empty({N}, dt);
    ops::scale_rows(kCpu, xc, sc, y);
    ops::scale_rows_backward(kCpu, xc, sc, dyc, dx, ds);
    Tensor y1 = Tensor::empty({N, D}, dt), dx1 = Tensor::empty({N, D}, dt), ds1 = Tensor::zeros({1}, dt);
    ops::scale_by_scalar(kCpu, xc, s1c, y1);
    ops::scale_by_scalar_backward(kCpu, xc, s1c, dyc, dx1, ds1);
    outs = {y, dx, ds, y1, dx1, ds1};
  };
  std::vector<Tensor> o64, o32;
  run(DType::F64, o64);
  run(DType::F32, o32);
  for (size_t i = 0; i < o64.size(); ++i) EXPECT_LE(rel_l2(o32[i], o64[i]), 1e-5) << i;
  EXPECT_NEAR(ops::sum_squares(kCpu, convert_dtype(x, DType::F32)), ops::sum_squares(kCpu, x),
              1e-6 * ops::sum_squares(kCpu, x));
}

TEST(ElementwiseCpu, RejectsBadShapesAndDtypes) {
  Tensor x = random_tensor({4, 6}, DType::F32, 41);
  EXPECT_THROW(ops::copy(kCpu, x, Tensor::empty({6, 4}, DType::F32)), Error);
  EXPECT_THROW(ops::copy(kCpu, x, Tensor::empty({4, 6}, DType::F64)), Error);
  EXPECT_THROW(ops::add_inplace(kCpu, x, Tensor::empty({4, 5}, DType::F32)), Error);
  EXPECT_THROW(ops::add_inplace(kCpu, Tensor::zeros({3}, DType::I32), Tensor::zeros({3}, DType::I32)), Error);
  EXPECT_THROW(ops::scale_by_scalar(kCpu, x, Tensor::empty({2}, DType::F32), Tensor::empty({4, 6}, DType::F32)), Error);
  EXPECT_THROW(ops::scale_by_scalar(kCpu, x, Tensor::empty({1}, DType::F32), Tensor::empty({4, 5}, DType::F32)), Error);
  EXPECT_THROW(ops::scale_by_scalar_backward(kCpu, x, Tensor::empty({1}, DType::F32), x,
                                             Tensor::empty({4, 6}, DType::F32), Tensor::zeros({1}, DType::F64)),
               Error);
  EXPECT_THROW(ops::scale_rows(kCpu, x, Tensor::empty({6}, DType::F32), Tensor::empty({4, 6}, DType::F32)), Error);
  EXPECT_THROW(ops::scale_rows(kCpu, x.reshape({24}), Tensor::empty({24}, DType::F32), x.reshape({24})), Error);
  EXPECT_THROW(ops::scale_rows_backward(kCpu, x, Tensor::empty({4}, DType::F32), x, Tensor::empty({4, 6}, DType::F32),
                                        Tensor::empty({6}, DType::F32)),
               Error);
  DeviceContext gpu;
  gpu.device = Device::CUDA;
  EXPECT_THROW(ops::sum_squares(gpu, x), Error);
}

}  // namespace
}  // namespace quill
