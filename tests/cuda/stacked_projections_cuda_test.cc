// The attention projections' stacked GEMMs on the GPU (model/attention_block.h: stacked_weights): one step
// of two rows with every layer's four weights back to back (one GEMM each way) against the same step with
// each layer's k weight and gradient moved apart (four GEMMs each way, the path before). cuBLASLt sums the
// stacked contraction in fp32 and rounds dx to bf16 once where the four GEMMs rounded it after each, so the
// bits differ; the loss and every gradient must agree to bf16 accuracy, and the stacked path must be the one
// taken (docs/decisions/stacked-projections.md). Under FP8 (the matrices marked before placement, as quill train
// marks them, so that their bf16 copies are transient): the four quantised copies joined, one FP8 GEMM each way
// against four, with FP8 weight gradients and under --no-fp8-wgrad, each held to the bf16 step (expect_as_close_to_bf16
// says why).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fmt/format.h>
#include <string>
#include <vector>

#include "cuda/harness.h"
#include "model/fp8_params.h"
#include "model/inkling_model.h"
#include "model/param_placement.h"
#include "ops/convert.h"
#include "ops/elementwise.h"
#include "ops/fp8_options.h"
#include "util/two_row_step.h"

namespace quill {
namespace {

struct StepResult {
  double loss = 0;
  std::vector<std::pair<std::string, std::vector<float>>> grads;
  int stacked_layers = 0;
};

// `fp8`: FP8 GEMMs (weight gradients in FP8 too when `fp8_wgrad`); a layer stacks when its four gradients are
// adjacent (and in bf16 its four weights).
StepResult gpu_step(bool apart, bool fp8 = false, bool fp8_wgrad = true) {
  const DeviceContext ctx = test::gpu_ctx();
  const InklingConfig config = load_inkling_config(std::string(QUILL_FIXTURES) + "/configs/determinism.json");
  ParamTable params = ParamTable::for_config(config);
  params.init_random(11, 0.02);
  ModelOptions options;
  if (fp8) {
    options.fp8 = ops::parse_fp8_options("e4m3", "blockwise", !fp8_wgrad);
    mark_fp8_params(params, ctx.device, options.fp8.fp8_wgrad());
  }
  place_params(params, ctx);
  StepResult r;
  for (int64_t l = 0; l < config.num_layers; ++l) {
    const std::string p = fmt::format("model.llm.layers.{}.attn.", l);
    Param& k = params.at(p + "wk_dv.weight");
    if (apart) {
      for (Tensor* t : {&k.compute, &k.grad}) {
        if (!t->defined()) continue;  // an FP8 matrix's transient bf16 copy
        Tensor moved = Tensor::empty(t->shape(), t->dtype(), *ctx.allocator);
        ops::copy(ctx, *t, moved);
        *t = moved;
      }
    }
    const Param &q = params.at(p + "wq_du.weight"), &v = params.at(p + "wv_dv.weight"), &rp = params.at(p + "wr_du.weight");
    const bool weights = fp8 ? StackedFp8Copy::stacks({&q, &k, &v, &rp})
                             : Tensor::joined_rows({q.compute, k.compute, v.compute, rp.compute}).defined();
    r.stacked_layers += weights && Tensor::joined_rows({q.grad, k.grad, v.grad, rp.grad}).defined();
  }
  InklingModel model(config, params, ctx, options);
  const int64_t T = 1024;
  r.loss = test::two_row_step(model, params, ctx, T, config.unpadded_vocab_size, /*prompt=*/16);
  for (const Param& p : params.params()) {
    if (!p.grad.defined()) continue;
    Tensor host = Tensor::empty(p.grad.shape(), DType::F32);
    ops::transfer(ctx, p.grad, host);
    r.grads.emplace_back(p.name, std::vector<float>(host.data_as<float>(), host.data_as<float>() + host.numel()));
  }
  return r;
}

double rel_l2(const std::vector<float>& got, const std::vector<float>& ref) {
  double diff = 0, norm = 0;
  for (size_t j = 0; j < got.size(); ++j) {
    diff += (static_cast<double>(got[j]) - ref[j]) * (static_cast<double>(got[j]) - ref[j]);
    norm += static_cast<double>(ref[j]) * ref[j];
  }
  return norm == 0 ? 0.0 : std::sqrt(diff / norm);
}

void expect_stacked(const StepResult& stacked, const StepResult& four) {
  EXPECT_EQ(stacked.stacked_layers, 3);  // every attention layer of the config
  EXPECT_EQ(four.stacked_layers, 0);
  EXPECT_NEAR(stacked.loss, four.loss, 1e-3 * std::abs(four.loss));
  ASSERT_EQ(stacked.grads.size(), four.grads.size());
}

void expect_agree(const StepResult& stacked, const StepResult& four) {
  expect_stacked(stacked, four);
  for (size_t i = 0; i < stacked.grads.size(); ++i)
    EXPECT_LT(rel_l2(stacked.grads[i].second, four.grads[i].second), 2e-2) << stacked.grads[i].first;
}

// Under FP8 the two paths cannot be held to each other at bf16's accuracy: a bf16 bit that differs between them
// (cuBLASLt sums the stacked GEMM in another order) moves a value across an E4M3 rounding step (an eighth of it), and
// the difference grows through every earlier layer's quantised GEMMs. On an H100 (2026-12-07,
// bench/results/2026-12-07-h100-fp8-factors-close) the two FP8 paths' gradients differed by up to 3.7% in the first
// two layers and under 2% in the last, while the 50-step slice converged with the stacked path as before. So each
// is held to what FP8 approximates, the same step in bf16: the stacked path no further from it than the four GEMMs
// (x1.5, + 1%), per gradient. A stacking that mixed up rows or columns lands at ~100%.
void expect_as_close_to_bf16(const StepResult& stacked, const StepResult& four, const StepResult& bf16) {
  expect_stacked(stacked, four);
  ASSERT_EQ(bf16.grads.size(), four.grads.size());
  double worst_pair = 0;
  for (size_t i = 0; i < stacked.grads.size(); ++i) {
    const std::vector<float>& ref = bf16.grads[i].second;
    const double four_err = rel_l2(four.grads[i].second, ref), stacked_err = rel_l2(stacked.grads[i].second, ref);
    worst_pair = std::max(worst_pair, rel_l2(stacked.grads[i].second, four.grads[i].second));
    EXPECT_LT(stacked_err, 1.5 * four_err + 1e-2)
        << stacked.grads[i].first << ": the stacked FP8 path " << stacked_err << " from bf16, the four GEMMs " << four_err;
  }
  std::printf("  stacked FP8 against four: largest gradient difference %.3g\n", worst_pair);
}

TEST(CudaStackedProjections, OneGemmEachWayAgreesWithFour) {
  QUILL_REQUIRE_GPU();
  expect_agree(gpu_step(false), gpu_step(true));
}

TEST(CudaStackedProjections, Fp8OneGemmEachWayAgreesWithFour) {
  QUILL_REQUIRE_GPU();
  const StepResult bf16 = gpu_step(true);
  for (bool fp8_wgrad : {true, false}) {
    SCOPED_TRACE(fp8_wgrad ? "FP8 weight gradients" : "--no-fp8-wgrad");
    expect_as_close_to_bf16(gpu_step(false, true, fp8_wgrad), gpu_step(true, true, fp8_wgrad), bf16);
  }
}

}  // namespace
}  // namespace quill
