// CUDA cross-entropy (src/ops/cuda/cross_entropy.cu) against the CPU reference: bf16 logits (and fp32),
// a padded vocabulary (columns >= vocab_limit get exactly zero), unsupervised rows (weight 0, with an
// ignore-index target they must never read: exactly zero gradient), a row count x vocabulary as the LM
// head's (T = 64, V = 201,024), and a target outside the vocabulary, which must name its position and
// leave dlogits untouched. Logits are rounded through bf16 first so both backends see the same numbers.
// Legend: T positions, V padded vocabulary, L = vocab_limit.
#include "ops/cross_entropy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <ostream>
#include <random>
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
using test::to_host_f32;

using test::expect_error;

struct Case {
  std::string name;
  int64_t T, V, L;
  DType dtype;      // of logits and dlogits on the GPU
  int zero_every;   // every zero_every-th row is unsupervised (0: none)
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

struct Batch {
  Tensor logits, targets, weights;
  double grad_scale = 0;
};

Batch make_batch(const Case& c, uint64_t seed) {
  Batch b;
  b.logits = random_tensor({c.T, c.V}, DType::F32, seed, 3.0);
  if (c.dtype == DType::BF16) b.logits = round_bf16(b.logits);
  b.targets = Tensor::empty({c.T}, DType::I32);
  b.weights = Tensor::empty({c.T}, DType::F32);
  std::mt19937 rng(static_cast<uint32_t>(seed));
  int64_t supervised = 0;
  for (int64_t t = 0; t < c.T; ++t) {
    const bool off = c.zero_every > 0 && t % c.zero_every == 1;
    b.targets.data_as<int32_t>()[t] = off ? -100 : static_cast<int32_t>(rng() % c.L);
    b.weights.data_as<float>()[t] = off ? 0.f : 1.f;
    supervised += off ? 0 : 1;
  }
  b.targets.data_as<int32_t>()[c.T - 1] = static_cast<int32_t>(c.L - 1);  // the last real column
  b.weights.data_as<float>()[c.T - 1] = 1.f;
  b.grad_scale = 1.0 / static_cast<double>(supervised + 1);
  return b;
}

class CudaCrossEntropyTest : public ::testing::TestWithParam<Case> {};

TEST_P(CudaCrossEntropyTest, LossAndGradientMatchCpu) {
  QUILL_REQUIRE_GPU();
  const Case& c = GetParam();
  const Batch b = make_batch(c, 1100);
  Tensor dlogits_ref = Tensor::empty({c.T, c.V}, DType::F32);
  const double loss_ref = ops::cross_entropy_forward_backward(DeviceContext::cpu(), b.logits, b.targets, b.weights,
                                                              c.L, b.grad_scale, dlogits_ref);

  auto dlogits = poisoned_output({c.T, c.V}, c.dtype);
  const double loss = ops::cross_entropy_forward_backward(test::gpu_ctx(), to_device(b.logits, c.dtype),
                                                          to_device(b.targets, DType::I32),
                                                          to_device(b.weights, DType::F32), c.L, b.grad_scale,
                                                          dlogits->tensor());
  EXPECT_NEAR(loss, loss_ref, 1e-5 * std::fabs(loss_ref)) << c.name << ": loss sum";
  const Tensor got = to_host_f32(dlogits->tensor());
  expect_close(c.name + " dlogits", got, dlogits_ref, c.dtype == DType::BF16 ? 1e-2 : 1e-5);
  EXPECT_TRUE(dlogits->guards_intact()) << c.name << ": dlogits written outside its bounds";
  // The target columns (p - 1, about -1) dominate the norm above; the softmax itself is checked here.
  Tensor got_off = got.clone(), ref_off = dlogits_ref.clone();
  for (int64_t t = 0; t < c.T; ++t) {
    if (b.weights.data_as<float>()[t] == 0.f) continue;
    const int64_t i = t * c.V + b.targets.data_as<int32_t>()[t];
    got_off.data_as<float>()[i] = ref_off.data_as<float>()[i] = 0.f;
  }
  expect_close(c.name + " dlogits off the target", got_off, ref_off, c.dtype == DType::BF16 ? 1e-2 : 1e-5);

  int64_t nonzero_padding = 0, nonzero_unsupervised = 0;
  for (int64_t t = 0; t < c.T; ++t) {
    const bool off = b.weights.data_as<float>()[t] == 0.f;
    for (int64_t v = 0; v < c.V; ++v) {
      const float g = got.data_as<float>()[t * c.V + v];
      if (v >= c.L && g != 0.f) ++nonzero_padding;
      if (off && g != 0.f) ++nonzero_unsupervised;
    }
  }
  EXPECT_EQ(nonzero_padding, 0) << c.name << ": columns >= vocab_limit must get exactly zero";
  EXPECT_EQ(nonzero_unsupervised, 0) << c.name << ": rows of weight 0 must get exactly zero";
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaCrossEntropyTest,
    ::testing::Values(Case{"bf16_V1000_L966", 37, 1000, 966, DType::BF16, 5},
                      Case{"bf16_odd_V1001", 23, 1001, 999, DType::BF16, 4},  // element loads
                      Case{"f32_V1000_L966", 37, 1000, 966, DType::F32, 5},
                      Case{"f32_odd_V777_L777", 9, 777, 777, DType::F32, 0},
                      Case{"bf16_lm_head_T64_V201024", 64, 201024, 200019, DType::BF16, 9}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

TEST(CudaCrossEntropy, TargetOutsideVocabularyNamesPositionAndWritesNothing) {
  QUILL_REQUIRE_GPU();
  const Case c{"bad", 12, 1000, 966, DType::BF16, 4};
  Batch b = make_batch(c, 1200);
  b.targets.data_as<int32_t>()[7] = 966;  // == vocab_limit: a padding column
  b.weights.data_as<float>()[7] = 1.f;
  b.targets.data_as<int32_t>()[9] = -3;
  b.weights.data_as<float>()[9] = 1.f;
  auto dlogits = poisoned_output({c.T, c.V}, DType::BF16);
  expect_error(
      [&] {
        ops::cross_entropy_forward_backward(test::gpu_ctx(), to_device(b.logits, DType::BF16),
                                            to_device(b.targets, DType::I32), to_device(b.weights, DType::F32), c.L,
                                            b.grad_scale, dlogits->tensor());
      },
      "cross_entropy_forward_backward: target 966 at position 7 (weight 1) is outside the vocabulary [0, 966)");
  const Tensor got = to_host_f32(dlogits->tensor());
  int64_t written = 0;
  for (int64_t i = 0; i < got.numel(); ++i) written += std::isnan(got.data_as<float>()[i]) ? 0 : 1;
  EXPECT_EQ(written, 0) << "dlogits written by a call that failed";
  EXPECT_TRUE(dlogits->guards_intact());
}

TEST(CudaCrossEntropy, WrongDtypesAndLimitsNameTheTensor) {
  QUILL_REQUIRE_GPU();
  const Case c{"dtypes", 4, 64, 60, DType::BF16, 0};
  const Batch b = make_batch(c, 1300);
  const Tensor logits = to_device(b.logits, DType::BF16), targets = to_device(b.targets, DType::I32);
  const Tensor weights = to_device(b.weights, DType::F32);
  auto dlogits = poisoned_output({c.T, c.V}, DType::BF16);
  expect_error(
      [&] {
        ops::cross_entropy_forward_backward(test::gpu_ctx(), logits, targets, to_device(b.weights, DType::BF16), c.L,
                                            1.0, dlogits->tensor());
      },
      "cross_entropy_forward_backward: weights has dtype BF16, expected F32");
  auto dlogits_f32 = poisoned_output({c.T, c.V}, DType::F32);
  expect_error(
      [&] {
        ops::cross_entropy_forward_backward(test::gpu_ctx(), logits, targets, weights, c.L, 1.0,
                                            dlogits_f32->tensor());
      },
      "cross_entropy_forward_backward: dlogits has dtype F32, expected BF16");
  expect_error(
      [&] { ops::cross_entropy_forward_backward(test::gpu_ctx(), logits, targets, weights, 65, 1.0, dlogits->tensor()); },
      "vocab_limit 65 is outside [1, 64]");
}

}  // namespace
}  // namespace quill
