// The attention block's q, k, v and r projections run as one GEMM each way when their weights lie back to
// back in their bucket (model/attention_block.h: stacked_weights), and as four GEMMs when they do not.
// On the CPU reference both do the same arithmetic in the same order (ops/cpu/linear.cc: the input
// gradient adds row m of the weight after row m - 1, across the four as within one; each weight-gradient
// row is its own sum), so the loss and every gradient are equal to the bit. On a GPU the stacked GEMM sums
// in cuBLASLt's order: the CUDA tests and the layout tests' tolerances cover that.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "model/inkling_model.h"
#include "model/param_placement.h"
#include "util/two_row_step.h"

namespace quill {
namespace {

const char* const kProjections[] = {"wq_du.weight", "wk_dv.weight", "wv_dv.weight", "wr_du.weight"};

struct StepResult {
  double loss = 0;
  std::vector<std::vector<float>> grads;
  int stacked_layers = 0;  // layers whose four weights and gradients lie back to back
};

// One two-row step. `apart`: every layer's k weight and gradient moved to storage of their own first (the
// same values), so that no layer's four weights are adjacent and each runs its four GEMMs.
StepResult step(bool apart) {
  InklingConfig config = load_inkling_config(std::string(QUILL_SOURCE_DIR) + "/configs/tiny.json");
  ParamTable params = ParamTable::for_config(config);
  params.init_random(11, 0.1);
  const DeviceContext ctx = DeviceContext::cpu();
  place_params(params, ctx);
  StepResult r;
  for (int64_t l = 0; l < config.num_layers; ++l) {
    const std::string p = fmt::format("model.llm.layers.{}.attn.", l);
    if (apart) {
      Param& k = params.at(p + "wk_dv.weight");
      k.compute = k.compute.clone();
      k.grad = k.grad.clone();
    }
    std::vector<const Param*> w;
    for (const char* name : kProjections) w.push_back(&params.at(p + name));
    const bool weights = Tensor::joined_rows({w[0]->compute, w[1]->compute, w[2]->compute, w[3]->compute}).defined();
    const bool grads = Tensor::joined_rows({w[0]->grad, w[1]->grad, w[2]->grad, w[3]->grad}).defined();
    EXPECT_EQ(weights, grads) << p;
    r.stacked_layers += weights && grads;
  }
  InklingModel model(config, params, ctx);
  const int64_t T = 24;
  r.loss = test::two_row_step(model, params, ctx, T, config.unpadded_vocab_size, /*prompt=*/3);
  for (const Param& p : params.params())
    if (p.grad.defined()) r.grads.emplace_back(p.grad.data_as<float>(), p.grad.data_as<float>() + p.grad.numel());
  return r;
}

TEST(StackedProjections, OneGemmEachWayEqualsFourOnTheCpuToTheBit) {
  const StepResult stacked = step(false), four = step(true);
  EXPECT_EQ(stacked.stacked_layers, 4);  // every layer of configs/tiny.json took the stacked GEMMs
  EXPECT_EQ(four.stacked_layers, 0);
  EXPECT_EQ(stacked.loss, four.loss);
  ASSERT_EQ(stacked.grads.size(), four.grads.size());
  int64_t nonzero = 0;
  for (size_t i = 0; i < stacked.grads.size(); ++i) {
    ASSERT_EQ(stacked.grads[i].size(), four.grads[i].size());
    for (size_t j = 0; j < stacked.grads[i].size(); ++j) {
      ASSERT_EQ(stacked.grads[i][j], four.grads[i][j]) << "tensor " << i << " element " << j;
      nonzero += stacked.grads[i][j] != 0.0f;
    }
  }
  EXPECT_GT(nonzero, 1000);
}

}  // namespace
}  // namespace quill
