// zero_grads(kOnFirstWrite) (docs/decisions/gradient-first-write.md) must give the gradients that zeroing
// every gradient first gives, whatever the gradient buffers held: here they hold NaN before the step, so a
// write that added to an unset gradient instead of overwriting it, or a gradient nothing wrote and
// settle_grads missed, shows up as NaN. Two rows (the second row's writes add), a frozen parameter (its
// writes go to scratch tensors), on the CPU reference, where both paths do the same arithmetic.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "model/inkling_model.h"
#include "model/param_placement.h"
#include "util/random_row.h"

namespace quill {
namespace {


// The trainable gradients after one two-row step with the given reset; before it every gradient
// holds `poison`.
std::vector<std::vector<float>> step_grads(GradReset how, float poison) {
  InklingConfig config = load_inkling_config(std::string(QUILL_SOURCE_DIR) + "/configs/tiny.json");
  ParamTable params = ParamTable::for_config(config);
  params.init_random(5, 0.1);
  params.freeze({"*layers.0.attn.wq_du.weight"});
  const DeviceContext ctx = DeviceContext::cpu();
  place_params(params, ctx);
  InklingModel model(config, params, ctx);
  const int64_t T = 12;
  auto after_prompt = [](int64_t t) { return t > 2; };
  const test::Row a = test::random_row(T, config.unpadded_vocab_size, 1, after_prompt),
                  b = test::random_row(T, config.unpadded_vocab_size, 2, after_prompt);
  const double scale = 1.0 / static_cast<double>(InklingModel::supervised_targets(a.mask.data(), T) +
                                                 InklingModel::supervised_targets(b.mask.data(), T));
  for (Param& p : params.params())
    if (p.grad.defined()) std::fill(p.grad.data_as<float>(), p.grad.data_as<float>() + p.grad.numel(), poison);
  zero_grads(params, ctx, how);
  model.train_row(a.tokens.data(), a.mask.data(), T, scale);
  model.train_row(b.tokens.data(), b.mask.data(), T, scale);
  settle_grads(params, ctx);
  std::vector<std::vector<float>> out;
  for (const Param& p : params.params()) {
    EXPECT_FALSE(p.grad_unset) << p.name;
    if (p.grad.defined()) out.emplace_back(p.grad.data_as<float>(), p.grad.data_as<float>() + p.grad.numel());
  }
  return out;
}

TEST(GradFirstWrite, EqualsZeroingEveryGradientWhateverTheBuffersHeld) {
  const std::vector<std::vector<float>> zeroed = step_grads(GradReset::kZero, 7.0f);
  const std::vector<std::vector<float>> lazy = step_grads(GradReset::kOnFirstWrite, std::numeric_limits<float>::quiet_NaN());
  ASSERT_EQ(zeroed.size(), lazy.size());
  int64_t nonzero = 0;
  for (size_t i = 0; i < zeroed.size(); ++i) {
    ASSERT_EQ(zeroed[i].size(), lazy[i].size());
    for (size_t j = 0; j < zeroed[i].size(); ++j) {
      ASSERT_EQ(zeroed[i][j], lazy[i][j]) << "tensor " << i << " element " << j;  // == : +0 and -0 are equal
      nonzero += zeroed[i][j] != 0.0f;
    }
  }
  EXPECT_GT(nonzero, 1000);  // the step did produce gradients
}

}  // namespace
}  // namespace quill
