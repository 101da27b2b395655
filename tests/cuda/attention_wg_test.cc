// The Hopper attention forward (src/ops/cuda/attention_wg_*.cu, entry point attention_forward_wgmma)
// against the CPU reference on every head-dim-128 shape of tests/cuda/attention_test.cc plus more GQA
// ratios, tile remainders and a case without bias; against the mma.sync forward on the slice's shapes; and three
// diagnostics that isolate one part of the kernel each and print the first mismatching elements with
// their coordinates (run them first when the main test fails: docs/decisions/attention-wgmma.md):
//   WindowOneCopiesValues        out = v exactly: P V, the V descriptor (MN-major), the output store
//   OneHotValuesShowScores       v = identity rows, so out[t][s] = P(t, s): S = Q K^T and the mask
//   BiasOnlyShowsTheBand         q = 0 and v = identity: out[t][s] = softmax of the bias alone (TMA band)
// The forward's two forms (--attention-forward-form, ops/kernel_trials.h: narrow 64-key tiles, the default; wide
// 128-key tiles with setmaxnreg, an experiment) each take every test: against the CPU, against mma.sync, the
// diagnostics (a wide form that hangs is caught by the test's timeout: its waits have none, attention_wg_layout.h).
// Every test skips without a GPU; those that need sm_90 skip on other GPUs.
// Legend: T positions, H query heads, G kv heads, d head dim, R bias rank, E bias extent.
#include "ops/cuda/attention_wg.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "cuda/attention_inputs.h"
#include "cuda/attention_wg_cases.h"
#include "cuda/harness.h"
#include "ops/attention.h"
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

std::vector<Case> cases() { return test::wg_cases(true); }

using Host = test::AttentionHost;
using OnGpu = test::AttentionOnGpu;
using test::upload;

Host make_inputs(const Case& c, uint64_t seed) { return test::attention_inputs(c.T, c.H, c.G, kD, c.R, c.E, seed); }

double expect_close(const std::string& what, const Tensor& got, const Tensor& ref, double tol) {
  const double err = test::expect_close(what, got, ref, tol);
  std::string key = what;
  for (char& ch : key)
    if (ch == ' ') ch = '_';
  ::testing::Test::RecordProperty(key, fmt::format("{:.3g}", err));
  return err;
}

// Prints the first `limit` elements of out [T, H, d] (host fp32) that differ from ref by more than
// abs_tol, with (t, h, j); returns how many differ. The coordinates of the first failures say which
// part of the kernel is wrong (a row pattern: the accumulator layout; a column pattern: a descriptor).
int64_t report_mismatches(const std::string& what, const Tensor& got, const Tensor& ref, int64_t T, int64_t H,
                          int64_t d, double abs_tol, int limit = 12) {
  int64_t bad = 0;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t j = 0; j < d; ++j) {
        const int64_t i = (t * H + h) * d + j;
        const double a = got.data_as<float>()[i], b = ref.data_as<float>()[i];
        if (!(std::fabs(a - b) <= abs_tol)) {
          if (bad < limit) ADD_FAILURE() << what << ": first mismatches: t=" << t << " h=" << h << " j=" << j << " got " << a << " want " << b;
          ++bad;
        }
      }
  if (bad > 0) ADD_FAILURE() << what << ": " << bad << " of " << T * H * d << " elements differ by more than " << abs_tol;
  return bad;
}

// The wgmma forward in `options`' form against the CPU reference on case c: out and lse, guard bands.
void check_against_cpu(const Case& c, cuda::attn_wg::Options options) {
  const AttentionParams p = params_of(c);
  const Host in = make_inputs(c, 1000);
  Tensor out_ref = Tensor::empty({c.T, c.H, kD}, DType::F32), lse_ref = Tensor::empty({c.H, c.T}, DType::F32);
  ops::attention_forward(DeviceContext::cpu(), in.q, in.k, in.v, in.r, in.table, p, out_ref, lse_ref);

  const OnGpu dev = upload(in);
  auto out = poisoned_output({c.T, c.H, kD}, DType::BF16);
  auto lse = poisoned_output({c.H, c.T}, DType::F32);
  options.sync_check = true;
  cuda::attn_wg::attention_forward_wgmma(test::gpu_ctx(), dev.q, dev.k, dev.v, dev.r, dev.table, p, out->tensor(),
                                         lse->tensor(), options);
  const Tensor o = to_host_f32(out->tensor()), l = to_host_f32(lse->tensor());
  const double err = expect_close(c.name + " out", o, out_ref, 1e-2);
  expect_close(c.name + " lse", l, lse_ref, 1e-4);
  if (!(err <= 1e-2)) report_mismatches(c.name + " out", o, out_ref, c.T, c.H, kD, 0.05);
  EXPECT_TRUE(out->guards_intact() && lse->guards_intact()) << c.name << ": written outside its bounds";
}

class CudaAttentionWgTest : public ::testing::TestWithParam<Case> {};

TEST_P(CudaAttentionWgTest, ForwardMatchesCpu) {
  QUILL_REQUIRE_SM90();
  check_against_cpu(GetParam(), cuda::attn_wg::Options{});
}

cuda::attn_wg::Options wide_form() {
  cuda::attn_wg::Options options;
  options.forward_form = AttentionForwardForm::kWide;
  return options;
}

TEST_P(CudaAttentionWgTest, WideFormMatchesCpu) {
  QUILL_REQUIRE_SM90();
  check_against_cpu(GetParam(), wide_form());
}

INSTANTIATE_TEST_SUITE_P(CudaAttentionWg, CudaAttentionWgTest, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

// The slice's layers (T = 8,192, 32 q / 8 kv heads, R = 16): the wgmma forward against the mma.sync
// forward (ops::attention_forward's path for local layers) on the same device inputs.
TEST(CudaAttentionWg, MatchesTensorCoreForwardOnSliceShapes) {
  QUILL_REQUIRE_SM90();
  struct Layer {
    const char* name;
    int64_t window, E;
    bool log_scaling;
  };
  const int64_t T = 8192, H = 32, G = 8, R = 16;
  for (const Layer& layer : {Layer{"local", 512, 512, false}, Layer{"global", 0, 1024, true}}) {
    const Case c{layer.name, T, H, G, R, layer.E, layer.window, layer.log_scaling, 4096.0};
    AttentionParams p = params_of(c);
    p.scale = 1.0 / static_cast<double>(kD);  // the model's scale (as bench/attention)
    const OnGpu dev = upload(make_inputs(c, 7000));
    const DeviceContext ctx = test::gpu_ctx();
    Tensor out_tc = Tensor::empty({T, H, kD}, DType::BF16, *ctx.allocator), lse_tc = Tensor::empty({H, T}, DType::F32, *ctx.allocator);
    cuda::attn_wg::attention_forward_mma_sync(ctx, dev.q, dev.k, dev.v, dev.r, dev.table, p, out_tc, lse_tc);
    const Tensor o_ref = to_host_f32(out_tc), l_ref = to_host_f32(lse_tc);
    for (cuda::attn_wg::Options options : {cuda::attn_wg::Options{}, wide_form()}) {
      const std::string what = std::string(layer.name) + " " + kernel_trial_name(options.forward_form);
      Tensor out = Tensor::empty({T, H, kD}, DType::BF16, *ctx.allocator), lse = Tensor::empty({H, T}, DType::F32, *ctx.allocator);
      options.sync_check = true;
      cuda::attn_wg::attention_forward_wgmma(ctx, dev.q, dev.k, dev.v, dev.r, dev.table, p, out, lse, options);
      const Tensor o = to_host_f32(out), l = to_host_f32(lse);
      expect_close(what + " out vs mma.sync", o, o_ref, 1e-2);
      expect_close(what + " lse vs mma.sync", l, l_ref, 1e-4);
      EXPECT_EQ(test::far_elements(o, o_ref), 0) << what << " out: elements far from mma.sync's";
      EXPECT_EQ(test::far_elements(l, l_ref), 0) << what << " lse: elements far from mma.sync's";
    }
  }
}

// The identity rows v[s, g, :] = e_s (s < 128): out[t, h, s] is then the probability of key s.
Tensor identity_values(int64_t T, int64_t G) {
  Tensor v = Tensor::zeros({T, G, kD}, DType::F32);
  for (int64_t s = 0; s < T && s < kD; ++s)
    for (int64_t g = 0; g < G; ++g) v.data_as<float>()[(s * G + g) * kD + s] = 1.0f;
  return v;
}

// Runs the kernel (each form) on host inputs; compares out with the CPU reference element by element.
void run_diagnostic_form(const std::string& name, const Case& c, const Host& in, double abs_tol,
                         cuda::attn_wg::Options options);
void run_diagnostic(const std::string& name, const Case& c, const Host& in, double abs_tol) {
  run_diagnostic_form(name + " narrow", c, in, abs_tol, cuda::attn_wg::Options{});
  run_diagnostic_form(name + " wide", c, in, abs_tol, wide_form());
}
void run_diagnostic_form(const std::string& name, const Case& c, const Host& in, double abs_tol,
                         cuda::attn_wg::Options options) {
  const AttentionParams p = params_of(c);
  Tensor out_ref = Tensor::empty({c.T, c.H, kD}, DType::F32), lse_ref = Tensor::empty({c.H, c.T}, DType::F32);
  ops::attention_forward(DeviceContext::cpu(), in.q, in.k, in.v, in.r, in.table, p, out_ref, lse_ref);
  const OnGpu dev = upload(in);
  auto out = poisoned_output({c.T, c.H, kD}, DType::BF16);
  auto lse = poisoned_output({c.H, c.T}, DType::F32);
  options.sync_check = true;
  cuda::attn_wg::attention_forward_wgmma(test::gpu_ctx(), dev.q, dev.k, dev.v, dev.r, dev.table, p, out->tensor(),
                                         lse->tensor(), options);
  EXPECT_EQ(report_mismatches(name + " out", to_host_f32(out->tensor()), out_ref, c.T, c.H, kD, abs_tol), 0);
  const Tensor l = to_host_f32(lse->tensor());
  int bad = 0;
  for (int64_t i = 0; i < l.numel(); ++i)
    if (!(std::fabs(l.data_as<float>()[i] - lse_ref.data_as<float>()[i]) <= 1e-3) && bad++ < 8)
      ADD_FAILURE() << name << " lse: h=" << i / c.T << " t=" << i % c.T << " got " << l.data_as<float>()[i] << " want "
                    << lse_ref.data_as<float>()[i];
}

// Window 1: each query sees only itself, so out = v (exact in bf16) whatever S is.
TEST(CudaAttentionWg, WindowOneCopiesValues) {
  QUILL_REQUIRE_SM90();
  const Case c{"window_one", 200, 4, 2, 16, 64, 1};
  run_diagnostic("window_one", c, make_inputs(c, 5000), 0.0);
}

// No bias, causal, T = 128 (two consumer warpgroups, two key tiles of the narrow form, one of the wide):
// out[t][s] = P(t, s).
TEST(CudaAttentionWg, OneHotValuesShowScores) {
  QUILL_REQUIRE_SM90();
  const Case c{"one_hot_scores", 128, 2, 1, 0, 4, 0};
  Host in = make_inputs(c, 6000);
  in.v = identity_values(c.T, c.G);
  run_diagnostic("one_hot_scores", c, in, 1e-2);  // bf16 rounding of P and of out: <= P * 2^-7
}

// q = 0: the scores are the bias alone; with identity values out[t][s] = softmax_s(bias(t, s)).
TEST(CudaAttentionWg, BiasOnlyShowsTheBand) {
  QUILL_REQUIRE_SM90();
  const Case c{"bias_only", 128, 2, 1, 16, 96, 0};
  Host in = make_inputs(c, 6100);
  in.q = Tensor::zeros({c.T, c.H, kD}, DType::F32);
  in.v = identity_values(c.T, c.G);
  in.table = random_tensor({c.R, c.E}, DType::F32, 6105, 1.0);  // a bias of a few units: visible in P
  run_diagnostic("bias_only", c, in, 1e-2);
}

TEST(CudaAttentionWg, RejectsOtherHeadDims) {
  QUILL_REQUIRE_SM90();
  const int64_t T = 9, H = 2, G = 1, d = 64, R = 3, E = 5;
  const DeviceContext ctx = test::gpu_ctx();
  const Tensor q = to_device(random_tensor({T, H, d}, DType::F32, 1), DType::BF16),
               k = to_device(random_tensor({T, G, d}, DType::F32, 2), DType::BF16),
               v = to_device(random_tensor({T, G, d}, DType::F32, 3), DType::BF16),
               r = to_device(random_tensor({T, H, R}, DType::F32, 4), DType::BF16),
               table = to_device(random_tensor({R, E}, DType::F32, 5), DType::F32);
  Tensor out = Tensor::empty({T, H, d}, DType::BF16, *ctx.allocator), lse = Tensor::empty({H, T}, DType::F32, *ctx.allocator);
  test::expect_error([&] { cuda::attn_wg::attention_forward_wgmma(ctx, q, k, v, r, table, AttentionParams{}, out, lse); },
                     "head dim 64");
}

}  // namespace
}  // namespace quill
