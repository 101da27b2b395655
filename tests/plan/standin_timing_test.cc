// The timed stand-ins' model (plan/standin_timing.h): one call's time is row_time of a one-call ledger row
// with the group placed as the projection places it, so the stand-ins of a step add up to the projection's
// modelled communication of the same rows.
#include "plan/standin_timing.h"

#include <gtest/gtest.h>

namespace quill::plan {
namespace {

TEST(StandInTiming, OneCallIsTheProjectionsRowTimeOfOneCall) {
  const CommModelParams p = h200_comm_params();
  const std::shared_ptr<const StandInTiming> timing = comm_model_timing(p);
  // A TP group inside a node, an all-gather of 64 MiB; a DP group across two nodes; an EP all-to-all across two.
  struct Case {
    std::vector<int> ranks;
    int me;
    const char* op;
    CallBytes bytes;
  };
  const Case cases[] = {{{0, 1, 2, 3}, 2, "all_gather", {64 << 20, 48 << 20, 48 << 20}},
                        {{3, 19}, 19, "reduce_scatter", {1 << 30, 1 << 29, 1 << 29}},
                        {{0, 4, 8, 12, 16, 20, 24, 28}, 8, "all_to_all", {7000000, 6000000, 6100000}},
                        {{8, 12}, 8, "send_recv", {2 << 20, 1 << 20, 1 << 20}}};
  for (const Case& c : cases) {
    const StandInCall call{"g", c.op, static_cast<int>(c.ranks.size()), c.bytes, &c.ranks, c.me};
    CollectiveRow row;
    row.group = "g";
    row.group_size = static_cast<int>(c.ranks.size());
    row.op = c.op;
    row.calls = 1;
    row.payload_bytes = c.bytes.payload;
    row.sent_bytes = c.bytes.sent;
    row.recv_bytes = c.bytes.recv;
    const double expected = row_time(row, place_group(c.ranks, c.me, p.gpus_per_node), p).total_s();
    EXPECT_GT(expected, 0) << c.op;
    EXPECT_DOUBLE_EQ(timing->seconds(call), expected) << c.op;
  }
}

TEST(StandInTiming, CallsAddUpToTheirRow) {
  const CommModelParams p = h200_comm_params();
  const std::shared_ptr<const StandInTiming> timing = comm_model_timing(p);
  const std::vector<int> ranks = {0, 8};  // across nodes
  double sum = 0;
  CollectiveRow row;
  row.group = "dp";
  row.group_size = 2;
  row.op = "all_reduce";
  for (int i = 1; i <= 5; ++i) {
    const CallBytes b{i * 1000000, i * 1000000, i * 1000000};
    sum += timing->seconds(StandInCall{"dp", "all_reduce", 2, b, &ranks, 8});
    row.calls += 1;
    row.payload_bytes += b.payload;
    row.sent_bytes += b.sent;
    row.recv_bytes += b.recv;
  }
  EXPECT_NEAR(sum, row_time(row, place_group(ranks, 8, p.gpus_per_node), p).total_s(), 1e-12);
}

}  // namespace
}  // namespace quill::plan
