// Which matrices run in FP8 (model/fp8_params.h), and their quantised copy: made on first use, reused
// while `compute` is unchanged (every micro-batch of a step), remade after compute_changed() (the
// optimizer's update).
#include "model/fp8_params.h"

#include <gtest/gtest.h>

#include "model/config.h"
#include "model/param_gemm.h"
#include "model/param_placement.h"
#include "ops/convert.h"
#include "ops/fp8.h"
#include "ops/linear.h"
#include "ops/moe.h"
#include "optim/adamw.h"
#include "util/test_util.h"

namespace quill {
namespace {

TEST(Fp8Params, TheLinearLayersOfAttentionMlpAndExpertsOnly) {
  for (const char* yes : {"model.llm.layers.0.attn.wq_du.weight", "model.llm.layers.3.attn.wk_dv.weight",
                          "model.llm.layers.1.attn.wv_dv.weight", "model.llm.layers.1.attn.wr_du.weight",
                          "model.llm.layers.2.attn.wo_ud.weight", "model.llm.layers.0.mlp.w13_dn.weight",
                          "model.llm.layers.0.mlp.w2_md.weight", "model.llm.layers.5.mlp.experts.w13_weight",
                          "model.llm.layers.5.mlp.experts.w2_weight",
                          "model.llm.layers.5.mlp.shared_experts.shared_w13_weight",
                          "model.llm.layers.5.mlp.shared_experts.shared_w2_weight"})
    EXPECT_TRUE(runs_in_fp8(yes)) << yes;
  for (const char* no : {"model.llm.embed.weight", "model.llm.unembed.weight", "model.llm.norm.weight",
                         "model.llm.layers.5.mlp.gate.weight", "model.llm.layers.5.mlp.gate.bias",
                         "model.llm.layers.0.attn.q_norm.weight", "model.llm.layers.0.attn.k_sconv.weight",
                         "model.llm.layers.0.attn.rel_logits_proj.proj", "model.llm.layers.0.mlp.global_scale"})
    EXPECT_FALSE(runs_in_fp8(no)) << no;
}

TEST(Fp8Params, MarksEveryFp8MatrixOfTheTinyModel) {
  ParamTable table = ParamTable::for_config(load_inkling_config(std::string(QUILL_SOURCE_DIR) + "/configs/tiny.json"));
  mark_fp8_params(table, Device::CPU, true);
  int marked = 0;
  for (const Param& p : table.params()) {
    EXPECT_EQ(p.fp8, runs_in_fp8(p.name)) << p.name;
    marked += p.fp8;
  }
  EXPECT_EQ(marked, 4 * 5 + 1 * 2 + 3 * 4);  // 4 layers' attention, 1 dense MLP, 3 MoE layers
}

// On CUDA the FP8 GEMMs need every FP8 matrix's dimensions multiples of 16: a matrix that is not is
// refused by name before any work; the CPU backend takes any shape.
TEST(Fp8Params, CudaRefusesMatricesWhoseDimensionsAreNotMultiplesOf16NamingTheTensor) {
  ParamTable table = ParamTable::for_config(load_inkling_config(std::string(QUILL_SOURCE_DIR) + "/configs/tiny.json"));
  for (Param& p : table.params())
    if (runs_in_fp8(p.name)) p.shape = {32, 48};
  EXPECT_NO_THROW(mark_fp8_params(table, Device::CUDA, true));
  table.at("model.llm.layers.2.attn.wk_dv.weight").shape = {32, 40};
  EXPECT_NO_THROW(mark_fp8_params(table, Device::CPU, true));
  const std::string what = test::error_of([&] { mark_fp8_params(table, Device::CUDA, true); });
  EXPECT_NE(what.find("--fp8-format e4m3 on CUDA: model.llm.layers.2.attn.wk_dv.weight has shape [32, 40]"),
            std::string::npos) << what;
}

// An FP8 matrix `name` with a random fp32 compute copy of `shape`.
Param fp8_matrix(const std::string& name, const Shape& shape, uint64_t seed) {
  Param p;
  p.name = name;
  p.fp8 = true;
  p.compute = test::random_tensor(shape, DType::F32, seed);
  p.shape = p.compute.shape();
  return p;
}

TEST(Fp8Params, QuantizedCopyMadeOncePerCompute) {
  const DeviceContext ctx = DeviceContext::cpu();
  Param p = fp8_matrix("model.llm.layers.0.attn.wq_du.weight", {130, 200}, 1);
  const ops::Fp8Tensor& first = fp8_weight(ctx, p);
  const void* codes = first.codes.data();
  const uint8_t code0 = first.codes.data_as<uint8_t>()[0];
  p.compute.data_as<float>()[0] = -p.compute.data_as<float>()[0];  // an update the copy must not see yet
  EXPECT_EQ(fp8_weight(ctx, p).codes.data_as<uint8_t>()[0], code0) << "remade within one step";
  ++p.compute_version;  // what ParamTable::compute_changed does after the optimizer's update
  const ops::Fp8Tensor& second = fp8_weight(ctx, p);
  EXPECT_EQ(second.codes.data(), codes) << "the copy's buffers are reused";
  EXPECT_EQ(second.codes.data_as<uint8_t>()[0], code0 ^ 0x80) << "not remade after the update";
}

// A transient bf16 copy (model/transient_compute.h) is quantised when released: the FP8 copy serves until the
// weights change, and a stale one without its bf16 copy is refused by name rather than made from nothing.
TEST(Fp8Params, AReleasedBf16CopyServesItsFp8CopyUntilTheWeightsChange) {
  const DeviceContext ctx = DeviceContext::cpu();
  Param p = fp8_matrix("model.llm.layers.0.mlp.w2_md.weight", {64, 48}, 2);
  const void* codes = fp8_weight(ctx, p).codes.data();
  p.compute = Tensor();  // released
  EXPECT_EQ(fp8_weight(ctx, p).codes.data(), codes);
  ++p.compute_version;  // the optimizer wrote the weights; no bf16 copy was held for it
  const std::string what = test::error_of([&] { fp8_weight(ctx, p); });
  EXPECT_NE(what.find("model.llm.layers.0.mlp.w2_md.weight: its FP8 copy is older than its weights"), std::string::npos)
      << what;
}

// An optimizer step makes the trainable matrices' FP8 copies stale and leaves a frozen one's current: on a GPU a
// frozen FP8 matrix's bf16 copy is released once quantised, so a stale mark would leave it with nothing to
// remake its copy from (found on an H100 by CudaFp8TransientCompute, 2026-12-06).
TEST(Fp8Params, AnOptimizerStepStalesTheTrainableCopiesOnly) {
  const DeviceContext ctx = DeviceContext::cpu();
  ParamTable table = ParamTable::for_config(load_inkling_config(std::string(QUILL_SOURCE_DIR) + "/configs/tiny.json"));
  table.init_random(3);
  table.freeze({"model.llm.layers.1.attn.wo_ud.weight"});
  mark_fp8_params(table, Device::CPU, true);
  place_params(table, ctx);
  for (const Param& p : table.params())
    if (p.fp8) fp8_weight(ctx, p);
  AdamW optimizer(table, AdamWConfig{}, ctx);
  for (Param& p : table.params())
    if (p.trainable) ops::transfer(ctx, test::random_tensor(p.shape, DType::F32, 9), p.grad);
  optimizer.update(1e-3, 1.0);
  int stale = 0;
  for (const Param& p : table.params()) {
    if (!p.fp8) continue;
    EXPECT_EQ(p.fp8_version == p.compute_version, !p.trainable) << p.name;
    stale += p.fp8_version != p.compute_version;
  }
  EXPECT_GT(stale, 10);
  EXPECT_EQ(table.at("model.llm.layers.1.attn.wo_ud.weight").fp8_version,
            table.at("model.llm.layers.1.attn.wo_ud.weight").compute_version);
}

// --no-fp8-wgrad (mark_fp8_params with fp8_wgrad false): an FP8 matrix keeps its FP8 forward and input gradient, and
// its weight gradient is the backend's GEMM over the unquantised operands, to the bit; with fp8_wgrad it is the FP8
// one. Dense and grouped.
TEST(Fp8Params, NoFp8WgradTakesTheWeightGradientFromTheUnquantisedOperands) {
  const DeviceContext ctx = DeviceContext::cpu();
  for (const bool fp8_wgrad : {true, false}) {
    ParamTable table =
        ParamTable::for_config(load_inkling_config(std::string(QUILL_SOURCE_DIR) + "/configs/tiny.json"));
    table.init_random(3);
    mark_fp8_params(table, Device::CPU, fp8_wgrad);
    place_params(table, ctx);
    const Param& dense = table.at("model.llm.layers.0.mlp.w2_md.weight");
    ASSERT_TRUE(dense.fp8);
    EXPECT_EQ(dense.fp8_wgrad, fp8_wgrad);
    const int64_t N = 48, M = dense.shape[0], K = dense.shape[1];
    const Tensor x = test::random_tensor({N, K}, DType::F32, 4), dy = test::random_tensor({N, M}, DType::F32, 5);
    const Tensor dw = Tensor::zeros({M, K}, DType::F32), plain = Tensor::zeros({M, K}, DType::F32),
                 fp8 = Tensor::zeros({M, K}, DType::F32);
    param_backward_weight(ctx, dy, x, dense, dw, false);
    ops::linear_backward_weight(ctx, dy, x, plain, false);
    ops::fp8_linear_backward_weight(ctx, dy, x, fp8, false);
    EXPECT_EQ(test::max_abs_diff(dw, fp8_wgrad ? fp8 : plain), 0.0) << "fp8_wgrad " << fp8_wgrad;
    EXPECT_GT(test::max_abs_diff(plain, fp8), 0.0) << "the test cannot tell the two paths apart";
    // The forward is FP8 either way.
    const Tensor y = Tensor::zeros({N, M}, DType::F32), y_fp8 = Tensor::zeros({N, M}, DType::F32);
    param_forward(ctx, x, dense, y);
    ops::fp8_linear_forward(ctx, x, fp8_weight(ctx, dense), y_fp8);
    EXPECT_EQ(test::max_abs_diff(y, y_fp8), 0.0);

    const Param& experts = table.at("model.llm.layers.2.mlp.experts.w2_weight");
    ASSERT_TRUE(experts.fp8);
    const int64_t E = experts.shape[0], EM = experts.shape[1], EK = experts.shape[2];
    const Tensor counts_E = Tensor::zeros({E}, DType::I64);
    counts_E.data_as<int64_t>()[0] = 20;  // two experts with rows, the others none
    counts_E.data_as<int64_t>()[E - 1] = 12;
    const Tensor xp = test::random_tensor({32, EK}, DType::F32, 6), dyp = test::random_tensor({32, EM}, DType::F32, 7);
    const Tensor gw = Tensor::zeros({E, EM, EK}, DType::F32), gplain = Tensor::zeros({E, EM, EK}, DType::F32),
                 gfp8 = Tensor::zeros({E, EM, EK}, DType::F32);
    param_grouped_backward_weight(ctx, dyp, xp, counts_E, experts, gw, false);
    ops::grouped_linear_backward_weight(ctx, dyp, xp, counts_E, gplain, false);
    ops::fp8_grouped_linear_backward_weight(ctx, dyp, xp, counts_E, gfp8, false);
    EXPECT_EQ(test::max_abs_diff(gw, fp8_wgrad ? gfp8 : gplain), 0.0) << "grouped, fp8_wgrad " << fp8_wgrad;
    EXPECT_GT(test::max_abs_diff(gplain, gfp8), 0.0);
  }
}

}  // namespace
}  // namespace quill
