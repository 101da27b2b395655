// The profiler's view of NCCL collectives on their own stream (ops/comm_profile.h): each operation's
// span on the communication stream, labelled by the op row that ran it, and how much of it ran while
// the compute stream ran other ops. One GPU, a one-rank communicator (its all-gather is a copy
// kernel on the communication stream, which is all a span needs).
#include <gtest/gtest.h>

#include <nccl.h>

#include <nlohmann/json.hpp>

#include "comm/nccl/nccl_comm.h"
#include "harness.h"
#include "ops/collective.h"
#include "ops/convert.h"
#include "ops/cuda/cuda_resources.h"
#include "ops/cuda/profiling.h"
#include "ops/elementwise.h"

namespace quill::test {
namespace {

const CommProfileRow* find_row(const OpProfile& p, const std::string& label) {
  for (const CommProfileRow& r : p.comm_rows)
    if (r.label == label) return &r;
  return nullptr;
}

TEST(CudaCommProfile, SpansAreLabelledTimedAndSplitIntoHiddenAndExposed) {
  QUILL_REQUIRE_GPU();
  const DeviceContext base = gpu_ctx();
  OpProfiler profiler(base);
  const DeviceContext ctx = profiler.context();
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  CommOptions options;
  options.on_error = CommOptions::OnError::Throw;
  NcclComm comm(id, 1, 0, stream_of(ctx), options, "tp", comm_stream_of(ctx));
  comm.set_timeline(ctx.cuda->comm_timeline);

  constexpr int64_t kN = 1 << 24;  // 64 MiB of fp32
  Tensor in = Tensor::empty({kN}, DType::F32, *ctx.allocator), out = Tensor::empty({kN}, DType::F32, *ctx.allocator);
  Tensor busy = Tensor::empty({kN}, DType::F32, *ctx.allocator), small = Tensor::empty({4}, DType::F32, *ctx.allocator);
  for (const Tensor& t : {in, busy, small}) ops::zero(ctx, t);
  comm.all_gather(in, out);  // before begin(): not recorded
  profiler.begin(3);
  // Blocking: the compute stream has nothing else to run meanwhile.
  ops::collective(ctx, "tp.all_gather", out, [&] { comm.all_gather(in, out); });
  // Started, then compute runs (200 passes over 64 MiB), then the wait.
  std::unique_ptr<CommHandle> h;
  ops::collective(ctx, "ep.dispatch", out, [&] { h = comm.start_all_gather(in, out); });
  for (int i = 0; i < 200; ++i) ops::scale_inplace(ctx, busy, 1.0);
  h->wait();
  comm.all_reduce(small, ReduceOp::Sum);  // outside every op
  const OpProfile p = profiler.end();
  comm.all_reduce(small, ReduceOp::Sum);  // after end(): not recorded
  cudaStreamSynchronize(stream_of(ctx));

  ASSERT_EQ(p.comm_rows.size(), 3u);
  const CommProfileRow* blocking = find_row(p, "tp.all_gather");
  const CommProfileRow* started = find_row(p, "ep.dispatch");
  const CommProfileRow* outside = find_row(p, "(outside ops)");
  ASSERT_TRUE(blocking && started && outside);
  EXPECT_EQ(blocking->group, "tp");
  EXPECT_EQ(blocking->op, "all_gather");
  EXPECT_EQ(blocking->group_size, 1);
  EXPECT_EQ(blocking->calls, 1);
  EXPECT_EQ(blocking->payload_bytes, 4.0 * kN);
  EXPECT_EQ(blocking->bus_bytes, 0);  // one rank moves nothing over a bus
  EXPECT_GT(blocking->comm_ms, 0);
  EXPECT_LT(blocking->hidden_ms, 0.05 * blocking->comm_ms + 0.002) << "a blocking collective ran under compute";
  EXPECT_GT(started->comm_ms, 0);
  EXPECT_GT(started->hidden_ms, 0.5 * started->comm_ms) << "the started copy did not overlap the 200 passes";
  EXPECT_EQ(outside->op, "all_reduce");
  const std::string table = op_profile_table(p, {});
  EXPECT_NE(table.find("collectives on their communication streams"), std::string::npos);
  const nlohmann::json j = nlohmann::json::parse(op_profile_json(p, {}));  // valid JSON, every row
  ASSERT_EQ(j.at("collectives").size(), 3u);
  EXPECT_NEAR(j["collectives"][0].at("comm_ms").get<double>(), p.comm_rows[0].comm_ms, 1e-6);
}

}  // namespace
}  // namespace quill::test
