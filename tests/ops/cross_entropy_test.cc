// Cross-entropy CPU reference: loss against a direct log-sum-exp, finite-difference gradient in
// double, zero gradient on padded columns and unweighted rows, stability for large logits, targets
// out of range named by position, shape errors, float/double agreement.
#include "ops/cross_entropy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "base/error.h"
#include "util/test_util.h"

namespace quill {
namespace {

using test::get;
using test::random_tensor;
using test::rel_l2;

const DeviceContext kCpu = DeviceContext::cpu();

// T = 7 positions, V = 11 padded columns, the softmax over the first 9.
constexpr int64_t kT = 7, kV = 11, kLimit = 9;
const std::vector<int32_t> kTargets = {2, 8, -100, 0, 5, 7, 3};
const std::vector<double> kWeights = {1, 1, 0, 1, 1, 0, 1};  // 5 supervised targets
constexpr double kGradScale = 1.0 / 5;

Tensor ids_tensor(const std::vector<int32_t>& ids) {
  Tensor t = Tensor::empty({static_cast<int64_t>(ids.size())}, DType::I32);
  for (size_t i = 0; i < ids.size(); ++i) t.data_as<int32_t>()[i] = ids[i];
  return t;
}

Tensor weights_tensor(const std::vector<double>& w, DType dtype) {
  Tensor t = Tensor::empty({static_cast<int64_t>(w.size())}, dtype);
  for (size_t i = 0; i < w.size(); ++i) test::set(t, static_cast<int64_t>(i), w[i]);
  return t;
}

using test::error_of;
// sum_t w[t] * (log sum_{v<L} exp(l[t, v]) - l[t, target]), without any max shift.
double direct_loss(const Tensor& logits, const std::vector<int32_t>& targets, const std::vector<double>& weights) {
  double loss = 0;
  for (int64_t t = 0; t < kT; ++t) {
    if (weights[static_cast<size_t>(t)] == 0) continue;
    double sum = 0;
    for (int64_t v = 0; v < kLimit; ++v) sum += std::exp(get(logits, t * kV + v));
    loss += weights[static_cast<size_t>(t)] * (std::log(sum) - get(logits, t * kV + targets[static_cast<size_t>(t)]));
  }
  return loss;
}

TEST(CrossEntropyCpu, LossMatchesDirectLogSumExp) {
  Tensor logits = random_tensor({kT, kV}, DType::F64, 1, 2.0);
  Tensor dlogits = Tensor::empty({kT, kV}, DType::F64);
  double loss = ops::cross_entropy_forward_backward(kCpu, logits, ids_tensor(kTargets),
                                                    weights_tensor(kWeights, DType::F64), kLimit, kGradScale, dlogits);
  EXPECT_NEAR(loss, direct_loss(logits, kTargets, kWeights), 1e-12);
}

TEST(CrossEntropyCpu, UniformLogitsGiveLogVocab) {
  Tensor logits = Tensor::zeros({kT, kV}, DType::F64);
  for (int64_t t = 0; t < kT; ++t)
    for (int64_t v = kLimit; v < kV; ++v) test::set(logits, t * kV + v, 50.0);  // padding must not count
  Tensor dlogits = Tensor::empty({kT, kV}, DType::F64);
  double loss = ops::cross_entropy_forward_backward(kCpu, logits, ids_tensor(kTargets),
                                                    weights_tensor(kWeights, DType::F64), kLimit, 1.0, dlogits);
  EXPECT_NEAR(loss, 5 * std::log(9.0), 1e-12);
  EXPECT_NEAR(get(dlogits, 0 * kV + 0), 1.0 / 9, 1e-15);
  EXPECT_NEAR(get(dlogits, 0 * kV + 2), 1.0 / 9 - 1, 1e-15);
}

TEST(CrossEntropyCpu, GradientMatchesFiniteDifferences) {
  Tensor logits = random_tensor({kT, kV}, DType::F64, 2, 2.0);
  Tensor targets = ids_tensor(kTargets);
  Tensor weights = weights_tensor(kWeights, DType::F64);
  Tensor dlogits = Tensor::empty({kT, kV}, DType::F64);
  ops::cross_entropy_forward_backward(kCpu, logits, targets, weights, kLimit, kGradScale, dlogits);
  Tensor scratch = Tensor::empty({kT, kV}, DType::F64);
  auto loss = [&] {
    return kGradScale * ops::cross_entropy_forward_backward(kCpu, logits, targets, weights, kLimit, 1.0, scratch);
  };
  test::check_gradients(loss, {{"logits", logits, dlogits}}, 1e-6, 1e-6);
}

TEST(CrossEntropyCpu, PaddedColumnsAndUnweightedRowsGetZeroGradient) {
  Tensor logits = random_tensor({kT, kV}, DType::F64, 3, 2.0);
  Tensor dlogits = random_tensor({kT, kV}, DType::F64, 4);  // garbage: overwritten everywhere
  ops::cross_entropy_forward_backward(kCpu, logits, ids_tensor(kTargets), weights_tensor(kWeights, DType::F64), kLimit,
                                      kGradScale, dlogits);
  for (int64_t t = 0; t < kT; ++t) {
    double row_sum = 0;
    for (int64_t v = 0; v < kV; ++v) {
      const double g = get(dlogits, t * kV + v);
      if (v >= kLimit || kWeights[static_cast<size_t>(t)] == 0) {
        EXPECT_EQ(g, 0.0) << t << "," << v;
      }
      row_sum += g;
    }
    EXPECT_NEAR(row_sum, 0.0, 1e-15) << t;  // softmax - onehot sums to zero
  }
}

TEST(CrossEntropyCpu, StableForLargeLogits) {
  Tensor logits = random_tensor({kT, kV}, DType::F64, 5, 2.0);
  Tensor shifted = logits.clone();
  for (int64_t i = 0; i < shifted.numel(); ++i) test::set(shifted, i, get(shifted, i) + 1000.0);  // exp overflows
  Tensor d0 = Tensor::empty({kT, kV}, DType::F64), d1 = Tensor::empty({kT, kV}, DType::F64);
  Tensor targets = ids_tensor(kTargets), weights = weights_tensor(kWeights, DType::F64);
  double l0 = ops::cross_entropy_forward_backward(kCpu, logits, targets, weights, kLimit, kGradScale, d0);
  double l1 = ops::cross_entropy_forward_backward(kCpu, shifted, targets, weights, kLimit, kGradScale, d1);
  ASSERT_TRUE(std::isfinite(l1));
  EXPECT_NEAR(l1, l0, 1e-9);
  EXPECT_LE(rel_l2(d1, d0), 1e-10);
}

TEST(CrossEntropyCpu, FloatAgreesWithDouble) {
  Tensor logits = random_tensor({kT, kV}, DType::F64, 6, 3.0);
  Tensor targets = ids_tensor(kTargets);
  Tensor d64 = Tensor::empty({kT, kV}, DType::F64), d32 = Tensor::empty({kT, kV}, DType::F32);
  double l64 = ops::cross_entropy_forward_backward(kCpu, logits, targets, weights_tensor(kWeights, DType::F64), kLimit,
                                                   kGradScale, d64);
  double l32 = ops::cross_entropy_forward_backward(kCpu, convert_dtype(logits, DType::F32), targets,
                                                   weights_tensor(kWeights, DType::F32), kLimit, kGradScale, d32);
  EXPECT_LE(std::fabs(l32 - l64) / std::fabs(l64), 1e-5);
  EXPECT_LE(rel_l2(d32, d64), 1e-5);
}

TEST(CrossEntropyCpu, OutOfRangeTargetNamesThePosition) {
  Tensor logits = random_tensor({kT, kV}, DType::F32, 7);
  Tensor weights = weights_tensor(kWeights, DType::F32);
  Tensor dlogits = Tensor::zeros({kT, kV}, DType::F32);
  std::vector<int32_t> bad = kTargets;
  bad[4] = kLimit;  // a padded column is not a valid target
  std::string msg = error_of(
      [&] { ops::cross_entropy_forward_backward(kCpu, logits, ids_tensor(bad), weights, kLimit, 1.0, dlogits); });
  EXPECT_NE(msg.find("position 4"), std::string::npos) << msg;
  EXPECT_EQ(test::max_abs_diff(dlogits, Tensor::zeros({kT, kV}, DType::F32)), 0.0);  // nothing written
  bad = kTargets;
  bad[0] = -1;
  msg = error_of(
      [&] { ops::cross_entropy_forward_backward(kCpu, logits, ids_tensor(bad), weights, kLimit, 1.0, dlogits); });
  EXPECT_NE(msg.find("position 0"), std::string::npos) << msg;
  // Out of range but unweighted (an ignore index) is fine: kTargets[2] = -100 has weight 0.
  EXPECT_NO_THROW(
      ops::cross_entropy_forward_backward(kCpu, logits, ids_tensor(kTargets), weights, kLimit, 1.0, dlogits));
}

TEST(CrossEntropyCpu, RejectsBadShapesAndDtypes) {
  Tensor logits = random_tensor({kT, kV}, DType::F32, 8);
  Tensor targets = ids_tensor(kTargets);
  Tensor weights = weights_tensor(kWeights, DType::F32);
  Tensor dlogits = Tensor::empty({kT, kV}, DType::F32);
  auto ce = [&](const Tensor& l, const Tensor& t, const Tensor& w, int64_t limit, const Tensor& d) {
    ops::cross_entropy_forward_backward(kCpu, l, t, w, limit, 1.0, d);
  };
  EXPECT_THROW(ce(logits, targets, weights, 0, dlogits), Error);
  EXPECT_THROW(ce(logits, targets, weights, kV + 1, dlogits), Error);
  EXPECT_THROW(ce(logits, targets, weights_tensor({1, 1, 1}, DType::F32), kLimit, dlogits), Error);
  EXPECT_THROW(ce(logits, targets, weights_tensor(kWeights, DType::F64), kLimit, dlogits), Error);
  EXPECT_THROW(ce(logits, Tensor::zeros({kT}, DType::I64), weights, kLimit, dlogits), Error);
  EXPECT_THROW(ce(logits, targets, weights, kLimit, Tensor::empty({kT, kV - 1}, DType::F32)), Error);
  EXPECT_THROW(ce(logits.reshape({kT * kV}), targets, weights, kLimit, dlogits), Error);
  EXPECT_NO_THROW(ce(logits, targets, weights, kV, dlogits));  // no padding at all
}

}  // namespace
}  // namespace quill
