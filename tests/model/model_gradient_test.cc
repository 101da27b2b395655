// Whole-model gradient check on the CPU reference: for every parameter tensor, the directional
// derivative of the loss along a random direction by central differences must match <grad, dir>.
// A directional check sums over the whole tensor, so it stays far above fp32 rounding noise; the
// per-op double-precision checks live in tests/ops. This catches wiring mistakes between ops.
#include <gtest/gtest.h>

#include <cmath>

#include "model/inkling_model.h"
#include "model/param_placement.h"
#include "util/random_row.h"
#include "util/test_util.h"

namespace quill {
namespace {

// Targets from position 4 on, every fifth position left out.
bool supervised_positions(int64_t t) { return t > 3 && t % 5 != 0; }

TEST(ModelGradient, DirectionalDerivativesMatchEveryParameter) {
  InklingConfig config = load_inkling_config(std::string(QUILL_SOURCE_DIR) + "/configs/tiny.json");
  ParamTable params = ParamTable::for_config(config);
  params.init_random(7, 0.2);
  // Non-trivial norms and scales so their gradients are exercised away from the identity.
  for (Param& p : params.params())
    if (p.name.ends_with("norm.weight") || p.name.ends_with("global_scale")) test::fill_normal(p.value, 11, 0.1, 1.0);
    else if (p.is_buffer) test::fill_normal(p.value, 13, 0.05);
  const int64_t T = 20;  // longer than the window (8) and past the log-scaling floor (16)
  const test::Row row = test::random_row(T, config.unpadded_vocab_size, 3, supervised_positions);
  InklingModel model(config, params, DeviceContext::cpu());
  const int64_t n = InklingModel::supervised_targets(row.mask.data(), T);
  zero_grads(params, DeviceContext::cpu());
  model.set_routing(InklingModel::Routing::Record);
  model.train_row(row.tokens.data(), row.mask.data(), T, 1.0 / static_cast<double>(n));
  settle_grads(params, DeviceContext::cpu());

  model.set_routing(InklingModel::Routing::Replay);  // the expert choice is piecewise constant
  auto loss = [&] { return model.eval_row(row.tokens.data(), row.mask.data(), T).loss_sum / static_cast<double>(n); };
  int checked = 0;
  for (Param& p : params.params()) {
    if (!p.trainable) continue;
    Tensor dir = test::random_tensor(p.shape, DType::F32, 100 + checked);
    const double analytic = test::dot(p.grad, dir);
    const Tensor saved = p.value.clone();
    const double norm_p = std::sqrt(test::dot(p.value, p.value) / static_cast<double>(p.value.numel())) + 1e-3;
    const double h = 1e-3 * norm_p;
    auto shift = [&](double s) {
      for (int64_t i = 0; i < p.value.numel(); ++i)
        p.value.data_as<float>()[i] = saved.data_as<float>()[i] + static_cast<float>(s * test::get(dir, i));
    };
    shift(h);
    const double up = loss();
    shift(-h);
    const double down = loss();
    shift(0);
    const double numeric = (up - down) / (2 * h);
    EXPECT_NEAR(numeric, analytic, 2e-2 * std::fabs(analytic) + 1e-4) << p.name;
    ++checked;
  }
  EXPECT_GT(checked, 50);
}

}  // namespace
}  // namespace quill

namespace quill {
namespace {

// Replaying the choice a free forward made gives the same loss bit for bit, and replaying another
// choice changes it (the replayed routing is really used).
TEST(RoutingReplay, OwnChoiceReproducesTheLossAndAnotherChoiceChangesIt) {
  InklingConfig config = load_inkling_config(std::string(QUILL_SOURCE_DIR) + "/configs/tiny.json");
  ParamTable params = ParamTable::for_config(config);
  params.init_random(9, 0.2);
  const int64_t T = 12;
  const test::Row row = test::random_row(T, config.unpadded_vocab_size, 5, supervised_positions);
  InklingModel model(config, params, DeviceContext::cpu());
  model.set_routing(InklingModel::Routing::Record);
  const double free_loss = model.eval_row(row.tokens.data(), row.mask.data(), T).loss_sum;

  // The recorded choice, as a routing file would give it: host I32 [T, k] per MoE layer.
  std::vector<Tensor> other(static_cast<size_t>(config.num_layers));
  model.set_routing(InklingModel::Routing::Replay);
  for (int64_t i = 0; i < config.num_layers; ++i) {
    if (!config.is_moe(i)) continue;
    Tensor t = Tensor::empty({T, config.num_experts_per_tok}, DType::I32);
    for (int64_t n = 0; n < t.numel(); ++n) t.data_as<int32_t>()[n] = static_cast<int32_t>(n % config.n_routed_experts);
    other[static_cast<size_t>(i)] = t;
  }
  // Recover the model's own choice by recording again and replaying it through the public API.
  model.set_routing(InklingModel::Routing::Record);
  model.eval_row(row.tokens.data(), row.mask.data(), T);
  model.set_routing(InklingModel::Routing::Replay);
  EXPECT_EQ(model.eval_row(row.tokens.data(), row.mask.data(), T).loss_sum, free_loss);
  model.replay_routing(other);
  EXPECT_NE(model.eval_row(row.tokens.data(), row.mask.data(), T).loss_sum, free_loss);
}

}  // namespace
}  // namespace quill
