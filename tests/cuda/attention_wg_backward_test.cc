// The Hopper attention backward (src/ops/cuda/attention_wg_backward.cu, entry point
// attention_backward_wgmma) against the CPU reference on the head-dim-128 shapes of the attention tests
// plus GQA ratios, partial key tiles (T not a multiple of 128), windows and E beyond T, with the same
// tolerances as tests/cuda/attention_test.cc; against the mma.sync backward on the slice's shapes and a TP4
// rank's; and bit for bit against itself (its dQ additions go in a fixed order). Grouped queries (H > G) take the
// path of per-query-head fp32 partials summed after (ops/attention_head_split.h), H == G the direct one. The producer
// form on trial (--attention-backward-form producer: a third warpgroup loads Q and dO and adds dQ) gives the
// consumers' form's bits on every case, since its dQ additions go in the same order. Skips without an sm_90 GPU (a
// producer form that hangs is caught by the test's timeout: its waits have none).
// Legend: T positions, H query heads, G kv heads, R bias rank, E bias extent.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include "cuda/attention_inputs.h"
#include "cuda/attention_wg_cases.h"
#include "cuda/harness.h"
#include "ops/attention.h"
#include "ops/cuda/attention_wg.h"
#include "util/test_util.h"

namespace quill {
namespace {

using ops::AttentionParams;
using test::poisoned_output;
using test::random_tensor;
using test::round_bf16;
using test::to_device;
using test::to_host_f32;

using Case = test::WgCase;
using test::params_of;
constexpr int64_t kD = test::kWgHeadDim;

// The forward's cases (attention_wg_cases.h) without window 1 (dS = 0 exactly there, so no relative error),
// with window 2 and a window spanning three key tiles of the backward instead.
std::vector<Case> cases() {
  std::vector<Case> c = test::wg_cases(false);
  c.push_back({"T384_window2", 384, 2, 1, 16, 64, 2});
  c.push_back({"T700_window200_E300_three_key_tiles_per_window", 700, 4, 1, 16, 300, 200});
  return c;
}

struct Grads {
  Tensor dq, dk, dv, dr, dtable;  // host fp32; dtable is the increment over the prior
};

struct Problem {
  Case c;
  AttentionParams p;
  test::AttentionHost in;
  Tensor out, lse, dout, dtable_prior;  // host: out rounded to bf16 (what the GPU forward stores)
};

Problem make_problem(const Case& c, uint64_t seed) {
  Problem pr{c, params_of(c), test::attention_inputs(c.T, c.H, c.G, kD, c.R, c.E, seed), {}, {}, {}, {}};
  Tensor out_f = Tensor::empty({c.T, c.H, kD}, DType::F32);
  pr.lse = Tensor::empty({c.H, c.T}, DType::F32);
  ops::attention_forward(DeviceContext::cpu(), pr.in.q, pr.in.k, pr.in.v, pr.in.r, pr.in.table, pr.p, out_f, pr.lse);
  pr.out = round_bf16(out_f);
  pr.dout = round_bf16(random_tensor({c.T, c.H, kD}, DType::F32, seed + 99));
  pr.dtable_prior = random_tensor({c.R, c.E}, DType::F32, seed + 98);
  return pr;
}

Grads cpu_grads(const Problem& pr) {
  const Case& c = pr.c;
  Grads g{Tensor::empty({c.T, c.H, kD}, DType::F32), Tensor::empty({c.T, c.G, kD}, DType::F32),
          Tensor::empty({c.T, c.G, kD}, DType::F32), Tensor::empty({c.T, c.H, c.R}, DType::F32),
          Tensor::zeros({c.R, c.E}, DType::F32)};
  ops::attention_backward(DeviceContext::cpu(), pr.in.q, pr.in.k, pr.in.v, pr.in.r, pr.in.table, pr.p, pr.out, pr.lse,
                          pr.dout, g.dq, g.dk, g.dv, g.dr, g.dtable);
  return g;
}

// The wgmma backward (wgmma = true) or the mma.sync backward on the GPU; outputs poisoned
// and guarded, dtable accumulated into the prior (the increment is returned).
Grads gpu_grads(const Problem& pr, bool wgmma, cuda::attn_wg::Options options = {}) {
  const Case& c = pr.c;
  const test::AttentionOnGpu dev = test::upload(pr.in);
  const Tensor out_d = to_device(pr.out, DType::BF16), lse_d = to_device(pr.lse, DType::F32),
               dout_d = to_device(pr.dout, DType::BF16);
  auto dq = poisoned_output({c.T, c.H, kD}, DType::BF16);
  auto dk = poisoned_output({c.T, c.G, kD}, DType::BF16);
  auto dv = poisoned_output({c.T, c.G, kD}, DType::BF16);
  auto dr = poisoned_output({c.T, c.H, c.R}, DType::BF16);
  auto dtable = test::to_guarded_device(pr.dtable_prior, DType::F32);
  if (wgmma) {
    options.sync_check = true;
    cuda::attn_wg::attention_backward_wgmma(test::gpu_ctx(), dev.q, dev.k, dev.v, dev.r, dev.table, pr.p, out_d, lse_d,
                                            dout_d, dq->tensor(), dk->tensor(), dv->tensor(), dr->tensor(),
                                            dtable->tensor(), options);
  } else {
    cuda::attn_wg::attention_backward_mma_sync(test::gpu_ctx(), dev.q, dev.k, dev.v, dev.r, dev.table, pr.p, out_d,
                                               lse_d, dout_d, dq->tensor(), dk->tensor(), dv->tensor(), dr->tensor(),
                                               dtable->tensor());
  }
  for (auto* t : {dq.get(), dk.get(), dv.get(), dr.get(), dtable.get()})
    EXPECT_TRUE(t->guards_intact()) << c.name << ": a gradient was written outside its bounds";
  Grads g{to_host_f32(dq->tensor()), to_host_f32(dk->tensor()), to_host_f32(dv->tensor()), to_host_f32(dr->tensor()),
          to_host_f32(dtable->tensor())};
  for (int64_t i = 0; i < g.dtable.numel(); ++i) g.dtable.data_as<float>()[i] -= pr.dtable_prior.data_as<float>()[i];
  return g;
}

void expect_grads_close(const std::string& what, const Grads& got, const Grads& ref, double tol, double dtable_tol) {
  const std::pair<const char*, std::pair<const Tensor*, const Tensor*>> parts[] = {
      {"dq", {&got.dq, &ref.dq}}, {"dk", {&got.dk, &ref.dk}}, {"dv", {&got.dv, &ref.dv}}, {"dr", {&got.dr, &ref.dr}}};
  for (const auto& [name, pair] : parts) {
    const double err = test::expect_close(what + " " + name, *pair.first, *pair.second, tol);
    ::testing::Test::RecordProperty(std::string(name), std::to_string(err));
  }
  if (ref.dtable.numel() > 0) test::expect_close(what + " dtable increment", got.dtable, ref.dtable, dtable_tol);
}

class CudaAttentionWgBackwardTest : public ::testing::TestWithParam<Case> {};

TEST_P(CudaAttentionWgBackwardTest, MatchesCpu) {
  QUILL_REQUIRE_SM90();
  const Problem pr = make_problem(GetParam(), 2000);
  expect_grads_close(GetParam().name, gpu_grads(pr, true), cpu_grads(pr), 2e-2, 1e-3);
}

INSTANTIATE_TEST_SUITE_P(CudaAttentionWgBackward, CudaAttentionWgBackwardTest, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

// A full-size problem (the CPU reference would take minutes): the model's scale, out and lse from the GPU forward
// (the model's path), dout random, no prior dtable.
Problem full_size_problem(const Case& c, uint64_t seed) {
  Problem pr{c, params_of(c), test::attention_inputs(c.T, c.H, c.G, kD, c.R, c.E, seed), {}, {}, {}, {}};
  pr.p.scale = 1.0 / static_cast<double>(kD);  // the model's scale
  const test::AttentionOnGpu dev = test::upload(pr.in);
  const DeviceContext ctx = test::gpu_ctx();
  Tensor out = Tensor::empty({c.T, c.H, kD}, DType::BF16, *ctx.allocator),
         lse = Tensor::empty({c.H, c.T}, DType::F32, *ctx.allocator);
  ops::attention_forward(ctx, dev.q, dev.k, dev.v, dev.r, dev.table, pr.p, out, lse);
  pr.out = to_host_f32(out);
  pr.lse = to_host_f32(lse);
  pr.dout = round_bf16(random_tensor({c.T, c.H, kD}, DType::F32, seed + 99));
  pr.dtable_prior = Tensor::zeros({c.R, c.E}, DType::F32);
  return pr;
}

cuda::attn_wg::Options producer_form() {
  cuda::attn_wg::Options options;
  options.backward_form = AttentionBackwardForm::kProducer;
  return options;
}

bool same_grads(const Grads& a, const Grads& b) {
  using test::same_bits;
  return same_bits(a.dq, b.dq) && same_bits(a.dk, b.dk) && same_bits(a.dv, b.dv) && same_bits(a.dr, b.dr) &&
         same_bits(a.dtable, b.dtable);
}

// The producer form adds the same dQ blocks in the same order and computes the rest as the consumers' form does.
TEST_P(CudaAttentionWgBackwardTest, TheProducerFormGivesTheConsumersFormsBits) {
  QUILL_REQUIRE_SM90();
  const Problem pr = make_problem(GetParam(), 2000);
  EXPECT_TRUE(same_grads(gpu_grads(pr, true, producer_form()), gpu_grads(pr, true))) << GetParam().name;
}

// A TP4 rank's layers at full length (8 q / 2 kv heads: the per-query-head partials; the local layer's window over
// several key tiles), where many CTAs wait for each other's dQ turns.
TEST(CudaAttentionWgBackward, TheProducerFormGivesTheConsumersFormsBitsAtATp4RanksShape) {
  QUILL_REQUIRE_SM90();
  for (const Case& c : {Case{"tp4_global", 8192, 8, 2, 16, 1024, 0, true, 4096.0},
                        Case{"tp4_local", 8192, 8, 2, 16, 512, 512, false}}) {
    const Problem pr = full_size_problem(c, 7100);
    EXPECT_TRUE(same_grads(gpu_grads(pr, true, producer_form()), gpu_grads(pr, true))) << c.name;
  }
}

// Two runs give the same bits (issue 24): the dQ additions of the key tiles go in a fixed order.
TEST(CudaAttentionWgBackward, SameBitsEveryRun) {
  QUILL_REQUIRE_SM90();
  const Problem pr = make_problem({"global_T2048", 2048, 8, 2, 16, 1024, 0, true, 300.0}, 3000);
  EXPECT_TRUE(same_grads(gpu_grads(pr, true), gpu_grads(pr, true))) << "two runs of the wgmma backward differ";
}

// The slice's layers (T = 8,192, 32 q / 8 kv heads, R = 16): against the mma.sync backward on the GPU
// (the CPU reference would take minutes at this size).
TEST(CudaAttentionWgBackward, MatchesTensorCoreBackwardOnSliceShapes) {
  QUILL_REQUIRE_SM90();
  // The slice's two layers, and a TP4 rank's global layer (8 q / 2 kv heads).
  const Case layers[] = {{"local", 8192, 32, 8, 16, 512, 512, false},
                         {"global", 8192, 32, 8, 16, 1024, 0, true, 4096.0},
                         {"global_tp4_rank", 8192, 8, 2, 16, 1024, 0, true, 4096.0}};
  for (const Case& c : layers) {
    const Problem pr = full_size_problem(c, 7000);
    expect_grads_close(c.name + " vs mma.sync", gpu_grads(pr, true), gpu_grads(pr, false), 1e-2, 1e-2);
  }
}

}  // namespace
}  // namespace quill
