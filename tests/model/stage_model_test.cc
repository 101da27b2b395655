// Stage models: the tiny model cut into pipeline stages and run stage after stage (each stage's
// output handed to the next, the gradients back) must give exactly the loss, expert counts and
// every parameter gradient of the one-stage model, bit for bit on the CPU reference: the same ops
// in the same order. Cuts include a stage holding only the dense layer 0.
#include <gtest/gtest.h>

#include "base/error.h"
#include "model/inkling_model.h"
#include "model/param_placement.h"
#include "util/random_row.h"

namespace quill {
namespace {

struct Outcome {
  double loss = 0;
  std::vector<std::vector<int64_t>> experts;
  std::vector<std::vector<float>> grads;
};

Outcome one_step(const std::vector<int64_t>& cuts) {
  const InklingConfig config = load_inkling_config(std::string(QUILL_SOURCE_DIR) + "/configs/tiny.json");
  ParamTable params = ParamTable::for_config(config);
  params.init_random(9, 0.1);
  const DeviceContext ctx = DeviceContext::cpu();
  place_params(params, ctx);
  std::vector<StageModel> stages;
  for (size_t s = 0; s + 1 < cuts.size(); ++s) stages.emplace_back(config, params, ctx, cuts[s], cuts[s + 1]);
  const int64_t T = 14;
  const test::Row a = test::random_row(T, config.unpadded_vocab_size, 3, [](int64_t t) { return t > 3; }),
                  b = test::random_row(T, config.unpadded_vocab_size, 4, [](int64_t t) { return t % 3 != 0; });
  const double scale =
      1.0 / static_cast<double>(supervised_targets(a.mask.data(), T) + supervised_targets(b.mask.data(), T));
  zero_grads(params, ctx);
  Outcome out;
  for (const test::Row* row : {&a, &b}) {
    const MicroBatch mb{row->tokens.data(), row->mask.data(), T, scale, nullptr};
    std::vector<StageModel::Activations> acts(stages.size());
    Tensor h;
    for (size_t s = 0; s < stages.size(); ++s) {
      h = stages[s].forward(mb, h, acts[s], true);
      for (const auto& e : acts[s].result.expert_tokens) out.experts.push_back(e);
    }
    EXPECT_FALSE(h.defined()) << "the last stage returns no hidden states";
    out.loss += acts.back().result.loss_sum;
    Tensor dh;
    for (size_t s = stages.size(); s-- > 0;) dh = stages[s].backward(acts[s], dh);
    EXPECT_FALSE(dh.defined()) << "the first stage returns no input gradient";
  }
  settle_grads(params, ctx);
  for (const Param& p : params.params())
    if (p.grad.defined()) out.grads.emplace_back(p.grad.data_as<float>(), p.grad.data_as<float>() + p.grad.numel());
  return out;
}

TEST(StageModel, StagesComposeToTheWholeModelBitForBit) {
  const Outcome whole = one_step({0, 4});
  EXPECT_GT(whole.loss, 0);
  for (const std::vector<int64_t>& cuts : {std::vector<int64_t>{0, 2, 4}, {0, 1, 4}, {0, 1, 2, 3, 4}, {0, 3, 4}}) {
    const Outcome split = one_step(cuts);
    EXPECT_EQ(split.loss, whole.loss) << "cuts of " << cuts.size() - 1 << " stages";
    EXPECT_EQ(split.experts, whole.experts);
    ASSERT_EQ(split.grads.size(), whole.grads.size());
    for (size_t i = 0; i < whole.grads.size(); ++i) EXPECT_EQ(split.grads[i], whole.grads[i]) << "tensor " << i;
  }
}

TEST(StageModel, RefusesAnEmptyOrOutOfRangeStage) {
  const InklingConfig config = load_inkling_config(std::string(QUILL_SOURCE_DIR) + "/configs/tiny.json");
  ParamTable params = ParamTable::for_config(config);
  const DeviceContext ctx = DeviceContext::cpu();
  EXPECT_THROW({ StageModel s(config, params, ctx, 2, 2); }, Error);
  EXPECT_THROW({ StageModel s(config, params, ctx, 0, 5); }, Error);
}

}  // namespace
}  // namespace quill
