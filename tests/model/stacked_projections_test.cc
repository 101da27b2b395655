// The attention block's q, k, v and r projections run as one GEMM each way when their weights lie back to
// back in their bucket (model/attention_block.h: stacked_weights), and as four GEMMs when they do not.
// On the CPU reference both do the same arithmetic in the same order (ops/cpu/linear.cc: the input
// gradient adds row m of the weight after row m - 1, across the four as within one; each weight-gradient
// row is its own sum), so the loss and every gradient are equal to the bit. On a GPU the stacked GEMM sums
// in cuBLASLt's order: the CUDA tests and the layout tests' tolerances cover that. Under FP8 the four quantised
// copies joined (StackedFp8Copy) are the joined matrix's quantisation, and the CPU's FP8 ops multiply the same
// dequantised values in the same order: the same bits again, with FP8 weight gradients and under --no-fp8-wgrad.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "model/fp8_params.h"
#include "model/inkling_model.h"
#include "model/param_placement.h"
#include "ops/fp8_options.h"
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
// `fp8`: with FP8 GEMMs (tests/fixtures/configs/fp8-stack.json, whose projections are whole 128-row blocks), their
// weight gradients in FP8 too when `fp8_wgrad`; a layer stacks when its four gradients are adjacent.
StepResult step(bool apart, bool fp8 = false, bool fp8_wgrad = true) {
  const std::string file = fp8 ? "/tests/fixtures/configs/fp8-stack.json" : "/configs/tiny.json";
  InklingConfig config = load_inkling_config(std::string(QUILL_SOURCE_DIR) + file);
  ParamTable params = ParamTable::for_config(config);
  params.init_random(11, 0.1);
  const DeviceContext ctx = DeviceContext::cpu();
  place_params(params, ctx);
  ModelOptions options;
  if (fp8) {
    options.fp8 = ops::parse_fp8_options("e4m3", "blockwise", !fp8_wgrad);
    mark_fp8_params(params, ctx.device, options.fp8.fp8_wgrad());
  }
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
    const bool weights = fp8 ? StackedFp8Copy::stacks(w)
                             : Tensor::joined_rows({w[0]->compute, w[1]->compute, w[2]->compute, w[3]->compute}).defined();
    const bool grads = Tensor::joined_rows({w[0]->grad, w[1]->grad, w[2]->grad, w[3]->grad}).defined();
    if (!fp8) EXPECT_EQ(weights, grads) << p;
    r.stacked_layers += weights && grads;
  }
  InklingModel model(config, params, ctx, options);
  const int64_t T = 24;
  r.loss = test::two_row_step(model, params, ctx, T, config.unpadded_vocab_size, /*prompt=*/3);
  for (const Param& p : params.params())
    if (p.grad.defined()) r.grads.emplace_back(p.grad.data_as<float>(), p.grad.data_as<float>() + p.grad.numel());
  return r;
}

void expect_same_bits(const StepResult& stacked, const StepResult& four) {
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

TEST(StackedProjections, OneGemmEachWayEqualsFourOnTheCpuToTheBit) {
  const StepResult stacked = step(false), four = step(true);
  EXPECT_EQ(stacked.stacked_layers, 4);  // every layer of configs/tiny.json took the stacked GEMMs
  EXPECT_EQ(four.stacked_layers, 0);
  expect_same_bits(stacked, four);
}

TEST(StackedProjections, Fp8OneGemmEachWayEqualsFourOnTheCpuToTheBit) {
  for (bool fp8_wgrad : {true, false}) {
    SCOPED_TRACE(fp8_wgrad ? "FP8 weight gradients" : "--no-fp8-wgrad");
    const StepResult stacked = step(false, true, fp8_wgrad), four = step(true, true, fp8_wgrad);
    EXPECT_EQ(stacked.stacked_layers, 4);  // every layer of fp8-stack.json took the stacked FP8 GEMMs
    EXPECT_EQ(four.stacked_layers, 0);
    expect_same_bits(stacked, four);
  }
}

}  // namespace
}  // namespace quill
