#include "optim/adamw.h"

#include <gtest/gtest.h>

#include <cmath>

#include "base/error.h"
#include "model/param_placement.h"

namespace quill {
namespace {

ParamTable two_params() {
  ParamTable t;
  for (auto [name, shape] : {std::pair<std::string, Shape>{"w", {2, 2}}, {"b", {2}}}) {
    Param p;
    p.name = name;
    p.shape = shape;
    p.weight_decay = shape.size() >= 2;
    p.value = Tensor::zeros(shape, DType::F32);
    p.grad = Tensor::zeros(shape, DType::F32);
    t.params().push_back(p);
  }
  return t;
}

// Two AdamW steps against torch.optim.AdamW's update written out in double.
TEST(AdamW, MatchesTorchUpdateWithDecoupledDecayAndClipping) {
  ParamTable t = two_params();
  const float w0[4] = {0.5f, -1.0f, 2.0f, 0.25f}, b0[2] = {1.0f, -2.0f};
  const float g[6] = {0.3f, -0.4f, 1.2f, 0.05f, -0.7f, 0.9f};
  for (int i = 0; i < 4; ++i) t.at("w").value.data_as<float>()[i] = w0[i];
  for (int i = 0; i < 2; ++i) t.at("b").value.data_as<float>()[i] = b0[i];
  place_params(t, DeviceContext::cpu());
  AdamWConfig c;
  c.beta1 = 0.9;
  c.beta2 = 0.98;
  c.eps = 1e-8;
  c.weight_decay = 0.1;
  c.clip_grad = 1.0;
  AdamW opt(t, c);
  double norm_sq = 0;
  for (float x : g) norm_sq += x * x;
  const double clip = std::min(1.0, 1.0 / (std::sqrt(norm_sq) + 1e-6));

  double ref[6] = {w0[0], w0[1], w0[2], w0[3], b0[0], b0[1]}, m[6] = {}, v[6] = {};
  const double lrs[2] = {1e-2, 5e-3};
  for (int step = 1; step <= 2; ++step) {
    for (int i = 0; i < 4; ++i) t.at("w").grad.data_as<float>()[i] = g[i];
    for (int i = 0; i < 2; ++i) t.at("b").grad.data_as<float>()[i] = g[4 + i];
    const double norm = opt.step(lrs[step - 1]);
    EXPECT_NEAR(norm, std::sqrt(norm_sq), 1e-6);
    for (int i = 0; i < 6; ++i) {
      const double gi = g[i] * clip, lr = lrs[step - 1];
      m[i] = 0.9 * m[i] + 0.1 * gi;
      v[i] = 0.98 * v[i] + 0.02 * gi * gi;
      if (i < 4) ref[i] *= 1 - lr * 0.1;  // no decay on the 1-D parameter
      ref[i] -= lr / (1 - std::pow(0.9, step)) * m[i] / (std::sqrt(v[i]) / std::sqrt(1 - std::pow(0.98, step)) + 1e-8);
    }
  }
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(t.at("w").value.data_as<float>()[i], ref[i], 1e-6) << i;
  for (int i = 0; i < 2; ++i) EXPECT_NEAR(t.at("b").value.data_as<float>()[i], ref[4 + i], 1e-6) << i;
}

TEST(AdamW, NonFiniteGradientStopsWithoutTouchingWeights) {
  ParamTable t = two_params();
  t.at("w").value.data_as<float>()[0] = 3.0f;
  place_params(t, DeviceContext::cpu());
  AdamW opt(t, AdamWConfig{});
  t.at("w").grad.data_as<float>()[1] = NAN;
  EXPECT_THROW(opt.step(1e-3), Error);
  EXPECT_EQ(t.at("w").value.data_as<float>()[0], 3.0f);
}

}  // namespace
}  // namespace quill
