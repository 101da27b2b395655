// CUDA attention (src/ops/cuda/attention_forward.cu, attention_backward.cu) against the CPU reference.
// Inputs are drawn in fp32 and rounded through bf16 first (the table stays fp32, as on the GPU), so
// both backends see the same numbers. The backward gets the same out (the CPU's, rounded to bf16),
// lse and dout on both sides, so a backward failure is the backward's own. Outputs are poisoned with
// NaN inside guard bands; dtable starts from nonzero contents and must come back as those plus the
// reference's gradient.
// Legend: T positions, H query heads, G kv heads, d head dim, R bias rank, E bias extent.
#include "ops/attention.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <ostream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "base/error.h"
#include "cuda/attention_inputs.h"
#include "cuda/harness.h"
#include "util/test_util.h"

namespace quill {
namespace {

using ops::AttentionParams;

// expect_close, with the error also recorded as a test property (visible in --gtest_output=xml)
// so that the margins of passing runs can be read, not only the failures.
double expect_close(const std::string& what, const Tensor& got, const Tensor& ref, double tol) {
  const double err = test::expect_close(what, got, ref, tol);
  std::string key = what;
  for (char& ch : key)
    if (ch == ' ') ch = '_';
  ::testing::Test::RecordProperty(key, fmt::format("{:.3g}", err));
  return err;
}

using test::poisoned_output;
using test::random_tensor;
using test::round_bf16;
using test::to_device;
using test::to_guarded_device;
using test::to_host_f32;

struct Case {
  std::string name;
  int64_t T, H, G, d, R, E;
  int64_t window;
  bool log_scaling = false;
  double log_floor = 128000.0;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

AttentionParams params_of(const Case& c) {
  AttentionParams p;
  p.window = c.window;
  p.scale = 1.0 / std::sqrt(static_cast<double>(c.d));  // random q, k: scores of unit size, softmax not flat
  p.log_scaling = c.log_scaling;
  p.log_floor = c.log_floor;
  p.log_alpha = 0.1;
  return p;
}

std::vector<Case> cases() {
  return {
      {"full_causal_E_beyond_T", 37, 2, 1, 16, 3, 50, 0},
      {"sliding_window_E_eq_window", 37, 2, 1, 24, 4, 5, 5},
      {"global_E_below_T", 37, 4, 2, 16, 3, 7, 0},
      {"window_two", 37, 4, 2, 16, 3, 4, 2},
      {"gqa_H_eq_G", 37, 3, 3, 24, 4, 9, 0},
      {"log_scaling_floor_8", 37, 4, 2, 16, 3, 7, 0, true, 8.0},
      {"d40_tiles_window_beyond_E", 130, 4, 2, 40, 4, 20, 70},
      {"d64_T300_global_log_scaling", 300, 4, 2, 64, 4, 100, 0, true, 100.0},
      {"d64_T300_window5_E7", 300, 4, 2, 64, 3, 7, 5},
      {"d128_T300_window70_E130", 300, 2, 1, 128, 16, 130, 70},
      {"d128_T300_global_E300", 300, 4, 1, 128, 16, 300, 0},
      // d = 128 runs the tensor-core path (attention_tc_*.cu); the others the CUDA-core kernels.
      {"d128_T77_G_eq_H_E_beyond_T_log_scaling", 77, 4, 4, 128, 5, 200, 0, true, 10.0},
      {"d128_T200_window64_E_above_window", 200, 8, 2, 128, 16, 96, 64},
      {"d128_T129_R1_E2_window3", 129, 2, 1, 128, 1, 2, 3},
      {"realistic_local_T1024", 1024, 8, 2, 128, 16, 512, 512},
      {"realistic_global_T1024_log_scaling", 1024, 8, 2, 128, 16, 1024, 0, true, 300.0},
  };
}

using Host = test::AttentionHost;
using OnGpu = test::AttentionOnGpu;
using test::upload;

Host make_inputs(const Case& c, uint64_t seed) { return test::attention_inputs(c.T, c.H, c.G, c.d, c.R, c.E, seed); }

class CudaAttentionTest : public ::testing::TestWithParam<Case> {};

TEST_P(CudaAttentionTest, ForwardMatchesCpu) {
  QUILL_REQUIRE_GPU();
  const Case& c = GetParam();
  const AttentionParams p = params_of(c);
  const Host in = make_inputs(c, 1000);
  Tensor out_ref = Tensor::empty({c.T, c.H, c.d}, DType::F32), lse_ref = Tensor::empty({c.H, c.T}, DType::F32);
  ops::attention_forward(DeviceContext::cpu(), in.q, in.k, in.v, in.r, in.table, p, out_ref, lse_ref);

  const OnGpu dev = upload(in);
  auto out = poisoned_output({c.T, c.H, c.d}, DType::BF16);
  auto lse = poisoned_output({c.H, c.T}, DType::F32);
  ops::attention_forward(test::gpu_ctx(), dev.q, dev.k, dev.v, dev.r, dev.table, p, out->tensor(), lse->tensor());
  expect_close(c.name + " out", to_host_f32(out->tensor()), out_ref, 1e-2);
  expect_close(c.name + " lse", to_host_f32(lse->tensor()), lse_ref, 1e-4);
  EXPECT_TRUE(out->guards_intact()) << c.name << ": out written outside its bounds";
  EXPECT_TRUE(lse->guards_intact()) << c.name << ": lse written outside its bounds";
}

TEST_P(CudaAttentionTest, BackwardMatchesCpu) {
  QUILL_REQUIRE_GPU();
  const Case& c = GetParam();
  const AttentionParams p = params_of(c);
  const Host in = make_inputs(c, 2000);
  Tensor out_f = Tensor::empty({c.T, c.H, c.d}, DType::F32), lse = Tensor::empty({c.H, c.T}, DType::F32);
  ops::attention_forward(DeviceContext::cpu(), in.q, in.k, in.v, in.r, in.table, p, out_f, lse);
  const Tensor out = round_bf16(out_f);  // what the GPU forward stores
  const Tensor dout = round_bf16(random_tensor({c.T, c.H, c.d}, DType::F32, 2099));

  Tensor dq_ref = Tensor::empty({c.T, c.H, c.d}, DType::F32), dk_ref = Tensor::empty({c.T, c.G, c.d}, DType::F32),
         dv_ref = Tensor::empty({c.T, c.G, c.d}, DType::F32), dr_ref = Tensor::empty({c.T, c.H, c.R}, DType::F32),
         dtable_ref = Tensor::zeros({c.R, c.E}, DType::F32);
  ops::attention_backward(DeviceContext::cpu(), in.q, in.k, in.v, in.r, in.table, p, out, lse, dout, dq_ref, dk_ref,
                          dv_ref, dr_ref, dtable_ref);

  const OnGpu dev = upload(in);
  const Tensor out_d = to_device(out, DType::BF16), lse_d = to_device(lse, DType::F32),
               dout_d = to_device(dout, DType::BF16);
  auto dq = poisoned_output({c.T, c.H, c.d}, DType::BF16);
  auto dk = poisoned_output({c.T, c.G, c.d}, DType::BF16);
  auto dv = poisoned_output({c.T, c.G, c.d}, DType::BF16);
  auto dr = poisoned_output({c.T, c.H, c.R}, DType::BF16);
  const Tensor prior = random_tensor({c.R, c.E}, DType::F32, 2098);  // dtable accumulates into this
  auto dtable = to_guarded_device(prior, DType::F32);
  ops::attention_backward(test::gpu_ctx(), dev.q, dev.k, dev.v, dev.r, dev.table, p, out_d, lse_d, dout_d,
                          dq->tensor(), dk->tensor(), dv->tensor(), dr->tensor(), dtable->tensor());

  expect_close(c.name + " dq", to_host_f32(dq->tensor()), dq_ref, 2e-2);
  expect_close(c.name + " dk", to_host_f32(dk->tensor()), dk_ref, 2e-2);
  expect_close(c.name + " dv", to_host_f32(dv->tensor()), dv_ref, 2e-2);
  expect_close(c.name + " dr", to_host_f32(dr->tensor()), dr_ref, 2e-2);
  // The increment is compared, so that the prior contents cannot hide an error in it.
  const Tensor dtable_got = to_host_f32(dtable->tensor());
  Tensor increment = Tensor::empty({c.R, c.E}, DType::F32);
  for (int64_t i = 0; i < increment.numel(); ++i)
    increment.data_as<float>()[i] = dtable_got.data_as<float>()[i] - prior.data_as<float>()[i];
  expect_close(c.name + " dtable increment", increment, dtable_ref, 1e-3);
  for (auto* g : {dq.get(), dk.get(), dv.get(), dr.get(), dtable.get()})
    EXPECT_TRUE(g->guards_intact()) << c.name << ": a gradient was written outside its bounds";
}

// A frozen table (Miles's default: the model passes no dtable) leaves dq, dk, dv and dr the same bits as with the
// table's gradient, on every path: the CUDA-core kernels (d 64), the tensor-core kernels (a local layer) and, on
// sm_90, the wgmma kernels (a global layer).
TEST(CudaAttention, AFrozenTableLeavesTheOtherGradientsAsTheyAre) {
  QUILL_REQUIRE_GPU();
  for (const Case& c : {Case{"d64_T300_window5_E7", 300, 4, 2, 64, 3, 7, 5},
                        Case{"realistic_local_T1024", 1024, 8, 2, 128, 16, 512, 512},
                        Case{"realistic_global_T1024_log_scaling", 1024, 8, 2, 128, 16, 1024, 0, true, 300.0}}) {
    SCOPED_TRACE(c.name);
    const AttentionParams p = params_of(c);
    const Host in = make_inputs(c, 3000);
    const OnGpu dev = upload(in);
    const Tensor out = to_device(Tensor::zeros({c.T, c.H, c.d}, DType::F32), DType::BF16);
    const Tensor lse = to_device(Tensor::zeros({c.H, c.T}, DType::F32), DType::F32);
    const Tensor dout = to_device(round_bf16(random_tensor({c.T, c.H, c.d}, DType::F32, 3099)), DType::BF16);
    test::inputs_ready();
    ops::attention_forward(test::gpu_ctx(), dev.q, dev.k, dev.v, dev.r, dev.table, p, out, lse);
    std::vector<Tensor> got[2];
    for (int frozen = 0; frozen < 2; ++frozen) {
      auto dq = poisoned_output({c.T, c.H, c.d}, DType::BF16);
      auto dk = poisoned_output({c.T, c.G, c.d}, DType::BF16);
      auto dv = poisoned_output({c.T, c.G, c.d}, DType::BF16);
      auto dr = poisoned_output({c.T, c.H, c.R}, DType::BF16);
      const Tensor dtable = frozen ? Tensor() : to_device(Tensor::zeros({c.R, c.E}, DType::F32), DType::F32);
      test::inputs_ready();
      ops::attention_backward(test::gpu_ctx(), dev.q, dev.k, dev.v, dev.r, dev.table, p, out, lse, dout, dq->tensor(),
                              dk->tensor(), dv->tensor(), dr->tensor(), dtable);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      for (auto* g : {dq.get(), dk.get(), dv.get(), dr.get()}) {
        EXPECT_TRUE(g->guards_intact()) << "a gradient was written outside its bounds";
        got[frozen].push_back(test::to_host(g->tensor()));
      }
    }
    for (size_t i = 0; i < got[0].size(); ++i) EXPECT_TRUE(test::same_bits(got[0][i], got[1][i])) << "gradient " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(CudaAttention, CudaAttentionTest, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

// The GPU backward fed the GPU forward's own out and lse (the model's path) agrees with the CPU chain.
TEST(CudaAttention, ForwardThenBackwardOnDevice) {
  QUILL_REQUIRE_GPU();
  const Case c{"chain", 200, 4, 2, 128, 16, 64, 96};
  const AttentionParams p = params_of(c);
  const Host in = make_inputs(c, 3000);
  const Tensor dout = round_bf16(random_tensor({c.T, c.H, c.d}, DType::F32, 3099));
  Tensor out_ref = Tensor::empty({c.T, c.H, c.d}, DType::F32), lse_ref = Tensor::empty({c.H, c.T}, DType::F32);
  ops::attention_forward(DeviceContext::cpu(), in.q, in.k, in.v, in.r, in.table, p, out_ref, lse_ref);
  Tensor dq_ref = Tensor::empty({c.T, c.H, c.d}, DType::F32), dk_ref = Tensor::empty({c.T, c.G, c.d}, DType::F32),
         dv_ref = Tensor::empty({c.T, c.G, c.d}, DType::F32), dr_ref = Tensor::empty({c.T, c.H, c.R}, DType::F32),
         dtable_ref = Tensor::zeros({c.R, c.E}, DType::F32);
  ops::attention_backward(DeviceContext::cpu(), in.q, in.k, in.v, in.r, in.table, p, out_ref, lse_ref, dout, dq_ref,
                          dk_ref, dv_ref, dr_ref, dtable_ref);

  const DeviceContext ctx = test::gpu_ctx();
  const OnGpu dev = upload(in);
  Tensor out = Tensor::empty({c.T, c.H, c.d}, DType::BF16, *ctx.allocator);
  Tensor lse = Tensor::empty({c.H, c.T}, DType::F32, *ctx.allocator);
  ops::attention_forward(ctx, dev.q, dev.k, dev.v, dev.r, dev.table, p, out, lse);
  Tensor dq = Tensor::empty({c.T, c.H, c.d}, DType::BF16, *ctx.allocator);
  Tensor dk = Tensor::empty({c.T, c.G, c.d}, DType::BF16, *ctx.allocator);
  Tensor dv = Tensor::empty({c.T, c.G, c.d}, DType::BF16, *ctx.allocator);
  Tensor dr = Tensor::empty({c.T, c.H, c.R}, DType::BF16, *ctx.allocator);
  Tensor dtable = to_device(Tensor::zeros({c.R, c.E}, DType::F32), DType::F32);
  ops::attention_backward(ctx, dev.q, dev.k, dev.v, dev.r, dev.table, p, out, lse, to_device(dout, DType::BF16), dq,
                          dk, dv, dr, dtable);
  expect_close("chain dq", to_host_f32(dq), dq_ref, 2e-2);
  expect_close("chain dk", to_host_f32(dk), dk_ref, 2e-2);
  expect_close("chain dv", to_host_f32(dv), dv_ref, 2e-2);
  expect_close("chain dr", to_host_f32(dr), dr_ref, 2e-2);
  expect_close("chain dtable", to_host_f32(dtable), dtable_ref, 1e-2);
}

// Window 1: each query sees only itself, so out = v, dv = the sum of dout over the group's heads,
// and dq, dk, dr, dtable vanish up to rounding (dP - D is zero only up to fp32 summation order,
// which is why this case is not in the relative-error list above: its reference is exactly 0).
TEST(CudaAttention, WindowOneIsIdentity) {
  QUILL_REQUIRE_GPU();
  const Case c{"window_one", 37, 4, 2, 24, 3, 4, 1};
  const AttentionParams p = params_of(c);
  const Host in = make_inputs(c, 5000);
  const Tensor dout = round_bf16(random_tensor({c.T, c.H, c.d}, DType::F32, 5099));
  const DeviceContext ctx = test::gpu_ctx();
  const OnGpu dev = upload(in);
  auto out = poisoned_output({c.T, c.H, c.d}, DType::BF16);
  auto lse = poisoned_output({c.H, c.T}, DType::F32);
  ops::attention_forward(ctx, dev.q, dev.k, dev.v, dev.r, dev.table, p, out->tensor(), lse->tensor());
  auto dq = poisoned_output({c.T, c.H, c.d}, DType::BF16);
  auto dk = poisoned_output({c.T, c.G, c.d}, DType::BF16);
  auto dv = poisoned_output({c.T, c.G, c.d}, DType::BF16);
  auto dr = poisoned_output({c.T, c.H, c.R}, DType::BF16);
  Tensor dtable = to_device(Tensor::zeros({c.R, c.E}, DType::F32), DType::F32);
  ops::attention_backward(ctx, dev.q, dev.k, dev.v, dev.r, dev.table, p, out->tensor(), lse->tensor(),
                          to_device(dout, DType::BF16), dq->tensor(), dk->tensor(), dv->tensor(), dr->tensor(), dtable);
  const Tensor o = to_host_f32(out->tensor());
  Tensor v_heads = Tensor::empty({c.T, c.H, c.d}, DType::F32), dv_ref = Tensor::zeros({c.T, c.G, c.d}, DType::F32);
  for (int64_t t = 0; t < c.T; ++t)
    for (int64_t h = 0; h < c.H; ++h)
      for (int64_t j = 0; j < c.d; ++j) {
        const int64_t g = h / (c.H / c.G);
        v_heads.data_as<float>()[(t * c.H + h) * c.d + j] = in.v.data_as<float>()[(t * c.G + g) * c.d + j];
        dv_ref.data_as<float>()[(t * c.G + g) * c.d + j] += dout.data_as<float>()[(t * c.H + h) * c.d + j];
      }
  EXPECT_EQ(test::max_abs_diff(o, v_heads), 0.0);  // a softmax over one key is exactly 1
  expect_close("window_one dv", to_host_f32(dv->tensor()), dv_ref, 1e-2);
  for (const Tensor& g : {to_host_f32(dq->tensor()), to_host_f32(dk->tensor()), to_host_f32(dr->tensor()),
                          to_host_f32(dtable)}) {
    double worst = 0;
    for (int64_t i = 0; i < g.numel(); ++i) worst = std::max(worst, std::fabs(static_cast<double>(g.data_as<float>()[i])));
    EXPECT_LE(worst, 1e-4) << "window one: a gradient that must vanish is " << worst;
  }
}

TEST(CudaAttention, RejectsWrongDtypesAndShapes) {
  QUILL_REQUIRE_GPU();
  const Case c{"bad", 9, 4, 2, 16, 3, 5, 0};
  const AttentionParams p = params_of(c);
  const OnGpu dev = upload(make_inputs(c, 4000));
  const DeviceContext ctx = test::gpu_ctx();
  Tensor out = Tensor::empty({c.T, c.H, c.d}, DType::BF16, *ctx.allocator);
  Tensor lse = Tensor::empty({c.H, c.T}, DType::F32, *ctx.allocator);
  EXPECT_NO_THROW(ops::attention_forward(ctx, dev.q, dev.k, dev.v, dev.r, dev.table, p, out, lse));
  auto message = [&](const Tensor& table, const Tensor& o, const Tensor& l) -> std::string {
    try {
      ops::attention_forward(ctx, dev.q, dev.k, dev.v, dev.r, table, p, o, l);
    } catch (const Error& e) {
      return e.what();
    }
    return "no throw";
  };
  const Tensor table_bf16 = to_device(Tensor::zeros({c.R, c.E}, DType::F32), DType::BF16);
  EXPECT_NE(message(table_bf16, out, lse).find("table_RE"), std::string::npos);
  const Tensor lse_bf16 = Tensor::empty({c.H, c.T}, DType::BF16, *ctx.allocator);
  EXPECT_NE(message(dev.table, out, lse_bf16).find("lse_HT"), std::string::npos);
  const Tensor out_short = Tensor::empty({c.T, c.H, c.d - 1}, DType::BF16, *ctx.allocator);
  EXPECT_NE(message(dev.table, out_short, lse).find("out_THd"), std::string::npos);
  const Tensor table_host = Tensor::zeros({c.R, c.E}, DType::F32);
  EXPECT_NE(message(table_host, out, lse).find("table_RE"), std::string::npos);
  // Head dims above 128 are refused with a message rather than run wrong.
  const Case wide{"wide", 9, 2, 1, 160, 3, 5, 0};
  const OnGpu dw = upload(make_inputs(wide, 4100));
  Tensor out_w = Tensor::empty({wide.T, wide.H, wide.d}, DType::BF16, *ctx.allocator);
  Tensor lse_w = Tensor::empty({wide.H, wide.T}, DType::F32, *ctx.allocator);
  EXPECT_THROW(ops::attention_forward(ctx, dw.q, dw.k, dw.v, dw.r, dw.table, params_of(wide), out_w, lse_w), Error);
}

}  // namespace
}  // namespace quill
