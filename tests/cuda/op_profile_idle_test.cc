// The profiler's gaps between ops (ops/cuda/profiling.h, IdleGapRow): the time the compute stream ran no op,
// summed by the pair of ops around each gap. A host pause between two ops (the stream drained first) must
// show as a gap of about the pause between exactly those two ops, and the ops and the gaps together must
// not exceed the step.
#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "harness.h"
#include "ops/cuda/cuda_resources.h"
#include "ops/cuda/profiling.h"
#include "ops/elementwise.h"

namespace quill::test {
namespace {

const IdleGapRow* find_gap(const OpProfile& p, const std::string& after, const std::string& before) {
  for (const IdleGapRow& g : p.idle_rows)
    if (g.after == after && g.before == before) return &g;
  return nullptr;
}

TEST(CudaOpProfileIdle, AHostPauseBetweenTwoOpsIsTheGapBetweenThem) {
  QUILL_REQUIRE_GPU();
  const DeviceContext base = gpu_ctx();
  OpProfiler profiler(base);
  const DeviceContext ctx = profiler.context();
  constexpr int64_t kN = 1 << 22;
  Tensor a = Tensor::empty({kN}, DType::F32, *ctx.allocator), b = Tensor::empty({kN}, DType::F32, *ctx.allocator);
  ops::zero(ctx, a);
  ops::zero(ctx, b);
  cudaStreamSynchronize(stream_of(ctx));

  constexpr double kPauseMs = 30;
  profiler.begin(1);
  for (int i = 0; i < 4; ++i) ops::scale_inplace(ctx, a, 1.0);  // back to back: no pause of the host
  ops::copy(ctx, a, b);
  cudaStreamSynchronize(stream_of(ctx));  // the stream drains, then the host pauses before the next op
  std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(kPauseMs));
  ops::add_inplace(ctx, a, b);
  const OpProfile p = profiler.end();

  const IdleGapRow* pause = find_gap(p, "copy", "add_inplace");
  ASSERT_NE(pause, nullptr) << op_profile_table(p, {});
  EXPECT_EQ(pause->gaps, 1);
  EXPECT_GT(pause->total_ms, 0.9 * kPauseMs);
  EXPECT_LT(pause->total_ms, 5 * kPauseMs);
  ASSERT_FALSE(p.idle_rows.empty());
  EXPECT_EQ(&p.idle_rows.front(), pause) << "the pause is the longest gap";
  const IdleGapRow* first = find_gap(p, "(step start)", "scale_inplace");
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->gaps, 1);
  const IdleGapRow* repeat = find_gap(p, "scale_inplace", "scale_inplace");
  ASSERT_NE(repeat, nullptr);
  EXPECT_EQ(repeat->gaps, 3);
  int64_t gaps = 0;
  double sum = 0;
  for (const IdleGapRow& g : p.idle_rows) {
    gaps += g.gaps;
    sum += g.total_ms;
  }
  EXPECT_EQ(gaps, p.calls) << "one gap before every outermost call";
  EXPECT_NEAR(sum, p.idle_ms, 1e-6);
  EXPECT_LE(p.ops_ms + p.idle_ms, p.step_ms + 0.01);
  EXPECT_NE(op_profile_table(p, {}).find("stream idle between ops"), std::string::npos);
  const nlohmann::json j = nlohmann::json::parse(op_profile_json(p, {}));
  EXPECT_NEAR(j.at("idle_ms").get<double>(), p.idle_ms, 1e-5);
  EXPECT_EQ(j.at("idle_gaps").size(), p.idle_rows.size());
}

}  // namespace
}  // namespace quill::test
