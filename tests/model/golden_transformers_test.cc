// quill's CPU model against Inkling itself: golden files written by transformers'
// InklingForCausalLM in fp32 (tools/parity/make_golden.py, run once on the GPU machine) for a tiny
// config that exercises every rule (dense and MoE layers, local and global layers, GQA, shared
// experts, a window smaller than the row, log scaling past a small floor). quill loads the same
// release-format checkpoint and rows and must match the logits, the loss, every gradient and the
// weights after 3 AdamW steps to a relative error of 1e-5 per tensor.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "base/file_util.h"
#include "io/hf_checkpoint.h"
#include "io/safetensors.h"
#include "model/inkling_model.h"
#include "model/param_placement.h"
#include "optim/adamw.h"
#include "util/test_util.h"

namespace quill {
namespace {

const std::string kDir = std::string(QUILL_FIXTURES) + "/golden/tiny";

struct Golden {
  InklingConfig config;
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::vector<uint8_t>> masks;
  nlohmann::json meta;
  SafetensorsFile file = SafetensorsFile::open(kDir + "/golden.safetensors");
};

Golden load_golden() {
  Golden g;
  g.config = load_inkling_config(kDir + "/config.json");
  const auto rows = nlohmann::json::parse(read_file(kDir + "/rows.json"));
  for (const auto& r : rows.at("rows")) {
    g.tokens.push_back(r.at("tokens").get<std::vector<int32_t>>());
    g.masks.push_back(r.at("mask").get<std::vector<uint8_t>>());
  }
  g.meta = nlohmann::json::parse(read_file(kDir + "/golden.json"));
  return g;
}

// A golden tensor in quill's internal layout (gate/up rows split).
Tensor golden_tensor(const Golden& g, const std::string& name, const Param& p) {
  Tensor t = g.file.tensor(name).clone();
  return p.gate_up_interleaved ? deinterleave_gate_up(t) : t;
}

struct Model {
  ParamTable params;
  std::unique_ptr<InklingModel> model;
};

Model load_model(const Golden& g) {
  Model m{ParamTable::for_config(g.config), nullptr};
  load_hf_checkpoint(kDir, m.params);
  std::vector<std::string> frozen;
  for (const auto& p : g.meta.at("frozen")) frozen.push_back(p.get<std::string>());
  m.params.freeze(frozen);
  place_params(m.params, DeviceContext::cpu());
  m.model = std::make_unique<InklingModel>(g.config, m.params, DeviceContext::cpu());
  return m;
}

int64_t batch_supervised(const Golden& g) {
  int64_t n = 0;
  for (size_t r = 0; r < g.tokens.size(); ++r)
    n += InklingModel::supervised_targets(g.masks[r].data(), static_cast<int64_t>(g.tokens[r].size()));
  return n;
}

// Forward and backward of the whole batch; returns the loss and fills logits per row.
double run_batch(const Golden& g, Model& m, std::vector<Tensor>* logits) {
  const int64_t n = batch_supervised(g);
  double sum = 0;
  zero_grads(m.params, DeviceContext::cpu());
  for (size_t r = 0; r < g.tokens.size(); ++r) {
    Tensor l;
    sum += m.model->train_row(g.tokens[r].data(), g.masks[r].data(), static_cast<int64_t>(g.tokens[r].size()),
                              1.0 / static_cast<double>(n), &l).loss_sum;
    if (logits) logits->push_back(l);
  }
  settle_grads(m.params, DeviceContext::cpu());
  return sum / static_cast<double>(n);
}

TEST(GoldenTransformers, LogitsLossAndEveryGradient) {
  Golden g = load_golden();
  Model m = load_model(g);
  std::vector<Tensor> logits;
  const double loss = run_batch(g, m, &logits);
  EXPECT_NEAR(loss, g.meta.at("loss").get<double>(), 1e-5 * std::fabs(g.meta.at("loss").get<double>()));

  const Tensor ref = g.file.tensor("logits");  // [R, T, V]
  const int64_t per_row = ref.numel() / ref.dim(0);
  for (int64_t r = 0; r < ref.dim(0); ++r) {
    Tensor row = Tensor::empty(logits[r].shape(), DType::F32);
    std::memcpy(row.data(), ref.data_as<float>() + r * per_row, row.nbytes());
    const double err = test::rel_l2(logits[r], row);
    EXPECT_LE(err, 1e-5) << "logits of row " << r;
    std::printf("logits of row %lld: relative L2 error vs transformers %.3g\n", static_cast<long long>(r), err);
  }
  int compared = 0;
  double worst = 0;
  for (const Param& p : m.params.params()) {
    const std::string name = "grad." + p.name;
    if (!p.trainable) {
      EXPECT_FALSE(g.file.contains(name)) << p.name << " is frozen in quill but has a golden gradient";
      continue;
    }
    ASSERT_TRUE(g.file.contains(name)) << "golden has no gradient for " << p.name;
    const double err = test::rel_l2(p.grad, golden_tensor(g, name, p));
    EXPECT_LE(err, 1e-5) << name;
    worst = std::max(worst, err);
    ++compared;
  }
  std::printf("worst gradient relative L2 error vs transformers: %.3g over %d tensors\n", worst, compared);
  EXPECT_GT(compared, 60);
}

TEST(GoldenTransformers, WeightsAfterThreeAdamWSteps) {
  Golden g = load_golden();
  Model m = load_model(g);
  const auto& opt = g.meta.at("optimizer");
  AdamWConfig c;
  c.beta1 = opt.at("betas").at(0).get<double>();
  c.beta2 = opt.at("betas").at(1).get<double>();
  c.eps = opt.at("eps").get<double>();
  c.weight_decay = opt.at("weight_decay").get<double>();
  c.clip_grad = opt.at("clip_grad_norm").get<double>();
  AdamW adam(m.params, c);
  const auto losses = g.meta.at("losses").get<std::vector<double>>();
  const auto norms = g.meta.at("grad_norms").get<std::vector<double>>();
  for (size_t step = 0; step < losses.size(); ++step) {
    const double loss = run_batch(g, m, nullptr);
    EXPECT_NEAR(loss, losses[step], 1e-5 * std::fabs(losses[step])) << "step " << step;
    const double norm = adam.step(opt.at("lr").get<double>());
    EXPECT_NEAR(norm, norms[step], 1e-5 * norms[step]) << "step " << step;
  }
  double worst = 0;
  for (const Param& p : m.params.params()) {
    const std::string name = "step3." + p.name;
    ASSERT_TRUE(g.file.contains(name)) << "golden has no step-3 value for " << p.name;
    const double err = test::rel_l2(p.value, golden_tensor(g, name, p));
    EXPECT_LE(err, 1e-5) << name;
    worst = std::max(worst, err);
  }
  std::printf("worst weight relative L2 error after 3 steps vs transformers: %.3g\n", worst);
}

}  // namespace
}  // namespace quill
