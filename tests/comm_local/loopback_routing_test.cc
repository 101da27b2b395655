// The routing models of a simulated rank's token exchange (comm/loopback_routing.h) by hand: balanced
// counts and their remainder, the recorded counts' per-step totals (the last micro-batch taking what is
// left, never below zero, the file's steps in turn), and the loopback applying a model only to the "ep"
// communicator's count exchange.
#include "comm/loopback_routing.h"

#include <gtest/gtest.h>

#include "base/error.h"

namespace quill {
namespace {

TEST(LoopbackRouting, BalancedSpreadsEveryPeersRowsOverTheExperts) {
  const auto r = balanced_routing();
  // E = 4 over 2 ranks; this rank (1) routes 8 rows: every peer sends 2 to each expert; from itself, its own.
  EXPECT_EQ(r->received({3, 1, 0, 4}, 1, 2), (std::vector<int64_t>{2, 2, 0, 4}));
  // 9 rows: expert 0 gets the remainder (rank 0's: from rank 1, 3 and 2).
  EXPECT_EQ(r->received({5, 1, 2, 1}, 0, 2), (std::vector<int64_t>{5, 1, 3, 2}));
}

TEST(LoopbackRouting, RecordedCountsGiveEachStepsTotals) {
  RecordedRouting rec;
  rec.counts = {{{10, 6}}};  // one step, one MoE layer, 2 experts
  rec.micro_batches = 2;
  const auto r = recorded_routing(rec);
  // Rank 0 of 2 holds expert 0 (X = 10). Micro-batch 0: own 3, the peer floor(10 / 4) = 2.
  EXPECT_EQ(r->received({3, 1}, 0, 2), (std::vector<int64_t>{3, 2}));
  // Micro-batch 1 (the last): own 4; the peer what is left, 10 - 7 - 2 = 1.
  EXPECT_EQ(r->received({4, 0}, 0, 2), (std::vector<int64_t>{4, 1}));
  // The next step cycles to the file's first again; routing more than the file: the peer sends nothing.
  EXPECT_EQ(r->received({9, 0}, 0, 2), (std::vector<int64_t>{9, 2}));
  EXPECT_EQ(r->received({9, 0}, 0, 2), (std::vector<int64_t>{9, 0}));
  // Scaled (half the tokens) and with more peers: 4 ranks of 1 expert each, rank 2 (X = 40 / 2 = 20), one
  // micro-batch: 20 - 5 = 15 over 3 peers.
  RecordedRouting four;
  four.counts = {{{8, 8, 40, 8}}};
  four.scale_num = 1, four.scale_den = 2;
  EXPECT_EQ(recorded_routing(four)->received({1, 1, 5, 1}, 2, 4), (std::vector<int64_t>{5, 5, 5, 5}));
  RecordedRouting bad;
  EXPECT_THROW(recorded_routing(bad), Error);
}

TEST(LoopbackRouting, OnlyTheExpertGroupsCountExchange) {
  LoopbackComm world(2, 1, "world", make_host_loopback_mover());
  world.set_routing(balanced_routing());
  std::unique_ptr<Comm> ep = world.split({0, 1}, "ep");
  Tensor in = Tensor::empty({4}, DType::I64), out = Tensor::zeros({4}, DType::I64);
  const int64_t sent[] = {3, 1, 0, 4};
  std::copy(sent, sent + 4, in.data_as<int64_t>());
  ep->all_to_all(in, {2, 2}, out, {2, 2});
  EXPECT_EQ(std::vector<int64_t>(out.data_as<int64_t>(), out.data_as<int64_t>() + 4), (std::vector<int64_t>{2, 2, 0, 4}));
  // The world communicator keeps the block rule: from rank 0 the block for rank (2 - 0) mod 2 = 0.
  world.all_to_all(in, {2, 2}, out, {2, 2});
  EXPECT_EQ(std::vector<int64_t>(out.data_as<int64_t>(), out.data_as<int64_t>() + 4), (std::vector<int64_t>{3, 1, 0, 4}));
  // Unequal counts (not the count exchange): the block rule too.
  ep->all_to_all(in, {1, 3}, out, {3, 1});
  EXPECT_EQ(out.data_as<int64_t>()[0], 3);
}

}  // namespace
}  // namespace quill
