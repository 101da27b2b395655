// --no-fp8-wgrad on the GPU (skips without one): one step of two rows of the determinism config, its FP8
// matrices marked before placement as quill train marks them (their bf16 copies transient:
// model/transient_compute.h), with and without every layer recomputed. Against the weight gradients in FP8 the
// loss and every gradient outside the FP8 matrices are the same bits (the forward and the input gradients do
// not change) and the FP8 matrices' gradients differ by FP8's rounding; against bf16 the loss and the gradient
// norm are close. The GPU's counterpart of the CPU's Fp8Train.NoFp8WgradChangesTheWeightGradientsOnly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "cuda/harness.h"
#include "model/fp8_params.h"
#include "model/inkling_model.h"
#include "model/param_placement.h"
#include "model/recompute.h"
#include "ops/convert.h"
#include "ops/fp8_options.h"
#include "util/random_row.h"
#include "util/two_row_step.h"

namespace quill {
namespace {

using test::gpu_ctx;

struct StepGrads {
  double loss = 0;
  std::map<std::string, std::vector<float>> grads;
};

enum class Arm { kBf16, kFp8, kFp8NoWgrad };

StepGrads one_step(Arm arm, bool recompute) {
  const DeviceContext ctx = gpu_ctx();
  const InklingConfig config = load_inkling_config(std::string(QUILL_FIXTURES) + "/configs/determinism.json");
  ParamTable params = ParamTable::for_config(config);
  params.init_random(11, 0.02);
  ModelOptions options;
  if (recompute) options.recompute = parse_recompute("full", "uniform", 1);
  if (arm != Arm::kBf16) {
    options.fp8 = ops::parse_fp8_options("e4m3", "blockwise", arm == Arm::kFp8NoWgrad);
    mark_fp8_params(params, ctx.device, options.fp8.fp8_wgrad());  // before placement, as quill train does
  }
  place_params(params, ctx);
  InklingModel model(config, params, ctx, options);
  const int64_t T = 1024;
  auto supervised = [](int64_t t) { return t > 8; };
  StepGrads out;
  out.loss = test::two_row_step(model, params, ctx, test::random_row(T, config.unpadded_vocab_size, 1, supervised),
                                test::random_row(T, config.unpadded_vocab_size, 2, supervised));
  for (const Param& p : params.params()) {
    if (!p.grad.defined()) continue;
    Tensor host = Tensor::empty(p.grad.shape(), DType::F32);
    ops::transfer(ctx, p.grad, host);
    out.grads[p.name].assign(host.data_as<float>(), host.data_as<float>() + host.numel());
  }
  return out;
}

double relative_l2(const std::vector<float>& a, const std::vector<float>& ref) {
  double d = 0, r = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    d += (double(a[i]) - ref[i]) * (double(a[i]) - ref[i]);
    r += double(ref[i]) * ref[i];
  }
  return std::sqrt(d / std::max(r, 1e-30));
}

double norm(const StepGrads& s) {
  double n = 0;
  for (const auto& [name, g] : s.grads)
    for (float v : g) n += double(v) * v;
  return std::sqrt(n);
}

TEST(CudaFp8Gradients, NoFp8WgradChangesOnlyTheFp8WeightGradientsAndStaysNearBf16) {
  QUILL_REQUIRE_GPU();
  for (bool recompute : {false, true}) {
    SCOPED_TRACE(recompute ? "every layer recomputed" : "no recompute");
    const StepGrads bf16 = one_step(Arm::kBf16, recompute), fp8 = one_step(Arm::kFp8, recompute);
    const StepGrads no_wgrad = one_step(Arm::kFp8NoWgrad, recompute);
    // The same forward and input gradients: the same loss and, outside the FP8 matrices, the same gradient bits.
    EXPECT_EQ(no_wgrad.loss, fp8.loss);
    ASSERT_EQ(no_wgrad.grads.size(), fp8.grads.size());
    double farthest = 0;
    for (const auto& [name, g] : fp8.grads) {
      const std::vector<float>& n = no_wgrad.grads.at(name);
      if (!runs_in_fp8(name)) {
        EXPECT_TRUE(n == g) << name << ": not an FP8 matrix, yet its gradient changed";
        continue;
      }
      // Each FP8 matrix's weight gradient from the bf16 operands against the quantised ones: e4m3's rounding
      // of both operands (3 mantissa bits, a 1x128 scale each), well under 10% of the gradient's norm.
      const double d = relative_l2(n, g);
      EXPECT_TRUE(std::isfinite(d) && d < 0.1) << name << ": relative L2 " << d;
      farthest = std::max(farthest, d);
    }
    // Against bf16 everywhere (FP8 forward and input gradients move the routing, so per tensor they may differ):
    // the loss within 0.1% and the gradient norm within 10%.
    for (const StepGrads* s : {&fp8, &no_wgrad}) {
      EXPECT_NEAR(s->loss, bf16.loss, 1e-3 * std::abs(bf16.loss));
      EXPECT_NEAR(norm(*s), norm(bf16), 0.1 * norm(bf16));
    }
    std::printf("  %s: loss %.4f (bf16 %.4f); gradient norm bf16 %.5g, fp8 %.5g, --no-fp8-wgrad %.5g; FP8 matrices' "
                "gradients with and without FP8 wgrad at most %.4f apart (relative L2)\n",
                recompute ? "recomputed" : "stored", fp8.loss, bf16.loss, norm(bf16), norm(fp8), norm(no_wgrad),
                farthest);
  }
}

}  // namespace
}  // namespace quill
