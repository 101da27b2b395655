// The communication model (plan/comm_model.h, docs/comm-model.md) against figures computed by hand:
// where the seed's groups sit (Megatron's rank order over nodes of 8), the time of each collective from
// its ledger row (nccl-tests' bus-bandwidth factors are already in the ledger's wire bytes), rings
// across nodes driving one port per rank of the node, the all-to-all split between NVLink and the
// network, point to point by the neighbour's node, and the refusals.
#include <gtest/gtest.h>

#include "base/error.h"
#include "parallel/grid.h"
#include "plan/comm_model.h"
#include "plan/ledger_row.h"

namespace {

using quill::CollectiveRow;
using quill::plan::CommModelParams;
using quill::plan::GroupPlacement;
using quill::plan::place_group;
using quill::plan::row_time;

CommModelParams params() {
  CommModelParams p;
  p.intra_node = {100.0, 10.0};  // GB/s, us
  p.inter_node = {25.0, 40.0};
  p.gpus_per_node = 8;
  return p;
}

CollectiveRow row(const std::string& op, int size, int64_t calls, int64_t payload, int64_t sent, int64_t recv) {
  return quill::test::ledger_row("passes", "g", size, op, calls, payload, sent, recv);
}

TEST(CommModel, SeedGroupsOverNodesOfEight) {
  quill::LayoutSpec spec;
  spec.tp = 4, spec.pp = 4, spec.dp = 2, spec.ep = 8, spec.sequence_parallel = true;
  const quill::Grid grid(32, spec);
  auto placed = [&](quill::GroupKind kind, int rank) { return place_group(grid.group(kind, rank).ranks, rank, 8); };
  // Tensor parallelism: ranks 8..11 of stage 1, one node.
  GroupPlacement tp = placed(quill::GroupKind::TP, 9);
  EXPECT_EQ(tp.size, 4);
  EXPECT_EQ(tp.nodes, 1);
  EXPECT_FALSE(tp.neighbour_off_node);
  // Expert parallelism: the 8 ranks of a stage (tp x dp), one node.
  EXPECT_EQ(placed(quill::GroupKind::EP, 9).nodes, 1);
  EXPECT_EQ(placed(quill::GroupKind::DP, 9).nodes, 1);  // {9, 13}
  // The pipeline: world/pp = 8 ranks apart, every stage on its own node.
  GroupPlacement pp = placed(quill::GroupKind::PP, 9);
  EXPECT_EQ(pp.size, 4);
  EXPECT_EQ(pp.nodes, 4);
  EXPECT_EQ(pp.min_ranks_per_node, 1);
  EXPECT_EQ(pp.ranks_on_my_node, 1);
  EXPECT_TRUE(pp.neighbour_off_node);
}

TEST(CommModel, RingCollectivesInsideANode) {
  const GroupPlacement g = place_group({0, 1, 2, 3}, 1, 8);
  // all_reduce of 8e8 bytes, twice: wire 2 * 3/4 * 8e8 = 1.2e9 each way (what the ledger records).
  quill::plan::RowTime t = row_time(row("all_reduce", 4, 2, 1'600'000'000, 2'400'000'000, 2'400'000'000), g, params());
  EXPECT_DOUBLE_EQ(t.latency_s, 2 * 10e-6);
  EXPECT_DOUBLE_EQ(t.transfer_s, 2.4e9 / 100e9);  // 0.024 s
  EXPECT_FALSE(t.inter_node);
  EXPECT_DOUBLE_EQ(t.busbw_gbps, 100.0);
  // all_gather of a 4e8-byte buffer: 3/4 of it each way.
  t = row_time(row("all_gather", 4, 1, 400'000'000, 300'000'000, 300'000'000), g, params());
  EXPECT_DOUBLE_EQ(t.total_s(), 10e-6 + 3e8 / 100e9);
  // A barrier: latency only.
  EXPECT_DOUBLE_EQ(row_time(row("barrier", 4, 3, 0, 0, 0), g, params()).total_s(), 3 * 10e-6);
}

TEST(CommModel, RingsAcrossNodesUseOnePortPerRankOfTheNode) {
  // One rank per node: the ring runs at one port's 25 GB/s.
  const GroupPlacement two = place_group({0, 8}, 8, 8);
  EXPECT_EQ(two.nodes, 2);
  quill::plan::RowTime t = row_time(row("reduce_scatter", 2, 1, 1'000'000'000, 500'000'000, 500'000'000), two, params());
  EXPECT_TRUE(t.inter_node);
  EXPECT_DOUBLE_EQ(t.latency_s, 40e-6);
  EXPECT_DOUBLE_EQ(t.transfer_s, 5e8 / 25e9);  // 0.02 s
  // Four ranks on each of two nodes: four ports, 100 GB/s, capped by NVLink's 100.
  const GroupPlacement eight = place_group({0, 1, 2, 3, 8, 9, 10, 11}, 2, 8);
  EXPECT_EQ(eight.min_ranks_per_node, 4);
  EXPECT_DOUBLE_EQ(quill::plan::effective_busbw_gbps("all_reduce", eight, params()), 100.0);
  // Two per node: 50 GB/s.
  EXPECT_DOUBLE_EQ(quill::plan::effective_busbw_gbps("all_gather", place_group({0, 1, 8, 9}, 0, 8), params()), 50.0);
}

TEST(CommModel, AllToAllSplitsBetweenNvlinkAndTheNetwork) {
  // Rank 0 of {0, 1, 8, 9}: one peer on its node, two off it; 3e9 bytes sent: 1e9 over NVLink (0.01 s),
  // 2e9 through its port (0.08 s), at once.
  const GroupPlacement g = place_group({0, 1, 8, 9}, 0, 8);
  const quill::plan::RowTime t = row_time(row("all_to_all", 4, 2, 4'000'000'000, 3'000'000'000, 2'400'000'000), g, params());
  EXPECT_TRUE(t.inter_node);
  EXPECT_DOUBLE_EQ(t.latency_s, 2 * 40e-6);
  EXPECT_NEAR(t.transfer_s, 2e9 / 25e9, 1e-12);
  // Inside a node: the larger direction at NVLink speed.
  const quill::plan::RowTime in = row_time(row("all_to_all", 4, 1, 4'000'000'000, 3'000'000'000, 2'000'000'000), place_group({4, 5, 6, 7}, 5, 8), params());
  EXPECT_DOUBLE_EQ(in.transfer_s, 3e9 / 100e9);
}

TEST(CommModel, PointToPointByTheNeighboursNode) {
  // A pipeline group whose stages sit on different nodes: every message through the port.
  const GroupPlacement pp = place_group({3, 11, 19, 27}, 11, 8);
  quill::plan::RowTime t = row_time(row("send_recv", 4, 10, 2'000'000'000, 1'000'000'000, 1'000'000'000), pp, params());
  EXPECT_TRUE(t.inter_node);
  EXPECT_DOUBLE_EQ(t.total_s(), 10 * 40e-6 + 1e9 / 25e9);  // both directions at once
  // Stages inside one node (a small layout on one machine): NVLink.
  const GroupPlacement near = place_group({0, 2}, 0, 8);
  t = row_time(row("send", 2, 4, 400'000'000, 400'000'000, 0), near, params());
  EXPECT_FALSE(t.inter_node);
  EXPECT_DOUBLE_EQ(t.total_s(), 4 * 10e-6 + 4e8 / 100e9);
  // The last stage's receive only: the receive direction.
  t = row_time(row("recv", 2, 4, 400'000'000, 0, 400'000'000), near, params());
  EXPECT_DOUBLE_EQ(t.transfer_s, 4e8 / 100e9);
}

TEST(CommModel, TheH200FiguresAndTheirSource) {
  const CommModelParams p = quill::plan::h200_comm_params();
  EXPECT_DOUBLE_EQ(p.intra_node.busbw_gbps, 370.0);
  EXPECT_DOUBLE_EQ(p.inter_node.busbw_gbps, 47.0);
  EXPECT_EQ(p.gpus_per_node, 8);
  EXPECT_NE(p.source.find("not measured by quill"), std::string::npos);
  EXPECT_NE(p.source.find("NVIDIA/nccl-tests#212"), std::string::npos);
}

TEST(CommModel, Refusals) {
  EXPECT_THROW(place_group({0, 1}, 5, 8), quill::Error);
  EXPECT_THROW(place_group({0, 1}, 0, 0), quill::Error);
  EXPECT_THROW(row_time(row("all_reduce_v", 2, 1, 8, 8, 8), place_group({0, 1}, 0, 8), params()), quill::Error);
  // A group of one moves nothing and costs nothing.
  EXPECT_DOUBLE_EQ(row_time(row("all_reduce", 1, 5, 100, 0, 0), GroupPlacement{}, params()).total_s(), 0.0);
}

}  // namespace
