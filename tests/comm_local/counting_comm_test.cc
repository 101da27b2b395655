// CountingComm and CollectiveLedger (comm/counting_comm.h, comm/collective_ledger.h): the bytes each
// operation records (payload and the ring algorithms' wire bytes), per step, group and operation,
// through splits. Over a loopback communicator: one process.
#include "comm/counting_comm.h"

#include <gtest/gtest.h>

#include "comm/loopback_comm.h"

namespace quill {
namespace {

const CollectiveRow* find(const std::vector<CollectiveRow>& rows, int64_t step, const std::string& group, const std::string& op) {
  for (const CollectiveRow& r : rows)
    if (r.step == step && r.group == group && r.op == op) return &r;
  return nullptr;
}

struct Counted {
  std::shared_ptr<CollectiveLedger> ledger = std::make_shared<CollectiveLedger>();
  CountingComm comm;
  Counted(int size, int rank)
      : comm(std::make_unique<LoopbackComm>(size, rank, "world", make_host_loopback_mover()), ledger) {}
};

TEST(CountingComm, RingBytesOfEveryCollective) {
  Counted c(4, 1);
  c.comm.all_reduce(Tensor::zeros({100}, DType::F32), ReduceOp::Sum);  // 400 bytes
  c.comm.reduce_scatter(Tensor::zeros({8}, DType::BF16), Tensor::zeros({2}, DType::BF16), ReduceOp::Sum);
  c.comm.all_gather(Tensor::zeros({2}, DType::F32), Tensor::zeros({8}, DType::F32));
  // Rank 1 sends 1, 2, 3, 4 elements to ranks 0..3 and receives 4, 2, 3, 1 (I64: 8 bytes each).
  c.comm.all_to_all(Tensor::zeros({10}, DType::I64), {1, 2, 3, 4}, Tensor::zeros({10}, DType::I64), {4, 2, 3, 1});
  c.comm.broadcast(Tensor::zeros({3}, DType::F32), 0);
  const auto rows = c.ledger->rows();
  const CollectiveRow* ar = find(rows, -1, "world", "all_reduce");
  ASSERT_NE(ar, nullptr);
  EXPECT_EQ(*ar, (CollectiveRow{-1, "world", 4, "all_reduce", 1, 400, 600, 600}));  // 2 * 3/4 * 400
  EXPECT_EQ(*find(rows, -1, "world", "reduce_scatter"), (CollectiveRow{-1, "world", 4, "reduce_scatter", 1, 16, 12, 12}));
  EXPECT_EQ(*find(rows, -1, "world", "all_gather"), (CollectiveRow{-1, "world", 4, "all_gather", 1, 32, 24, 24}));
  EXPECT_EQ(*find(rows, -1, "world", "all_to_all"), (CollectiveRow{-1, "world", 4, "all_to_all", 1, 80, 64, 64}));
  EXPECT_EQ(*find(rows, -1, "world", "broadcast"), (CollectiveRow{-1, "world", 4, "broadcast", 1, 12, 0, 12}));
}

TEST(CountingComm, PointToPointAndStepsAndSplits) {
  Counted c(4, 2);
  c.ledger->set_step(3);
  std::unique_ptr<Comm> pp = c.comm.split({0, 2}, "pp");  // counted as a split of world, at step 3
  c.ledger->set_step(7);
  const Tensor act = Tensor::zeros({4, 8}, DType::F32);    // 128 bytes
  for (int i = 0; i < 2; ++i) pp->send_recv(act, 0, Tensor::zeros({4, 8}, DType::F32), 0);
  pp->send(act, 0);
  pp->recv(Tensor::zeros({2}, DType::F32), 0);
  pp->barrier();
  c.ledger->set_optimizer_phase();
  pp->all_reduce(Tensor::zeros({4}, DType::F32), ReduceOp::Sum);  // step 7's optimizer phase
  c.ledger->set_step(-1);
  c.ledger->set_optimizer_phase();  // no phase outside the steps
  pp->all_reduce(Tensor::zeros({2}, DType::F64), ReduceOp::Max);  // 16 bytes over 2 ranks: 16 each way
  const auto rows = c.ledger->rows();
  EXPECT_EQ(*find(rows, 3, "world", "split"), (CollectiveRow{3, "world", 4, "split", 1, 0, 0, 0, "passes"}));
  EXPECT_EQ(*find(rows, 7, "pp", "send_recv"), (CollectiveRow{7, "pp", 2, "send_recv", 2, 512, 256, 256, "passes"}));
  EXPECT_EQ(*find(rows, 7, "pp", "send"), (CollectiveRow{7, "pp", 2, "send", 1, 128, 128, 0, "passes"}));
  EXPECT_EQ(*find(rows, 7, "pp", "recv"), (CollectiveRow{7, "pp", 2, "recv", 1, 8, 0, 8, "passes"}));
  EXPECT_EQ(*find(rows, 7, "pp", "barrier"), (CollectiveRow{7, "pp", 2, "barrier", 1, 0, 0, 0, "passes"}));
  EXPECT_EQ(*find(rows, -1, "pp", "all_reduce"), (CollectiveRow{-1, "pp", 2, "all_reduce", 1, 16, 16, 16}));
  EXPECT_EQ(*find(rows, 7, "pp", "all_reduce"), (CollectiveRow{7, "pp", 2, "all_reduce", 1, 16, 16, 16, "optimizer"}));
  // Sorted by step, then phase, group and op.
  for (size_t i = 1; i < rows.size(); ++i)
    EXPECT_TRUE(std::tie(rows[i - 1].step, rows[i - 1].phase, rows[i - 1].group, rows[i - 1].op) <
                std::tie(rows[i].step, rows[i].phase, rows[i].group, rows[i].op));
}

TEST(CollectiveLedger, LoopbackSecondsGoToThePresentStepAndPhase) {
  CollectiveLedger ledger;
  ledger.add_loopback_seconds(0.5);  // set-up: outside the steps
  ledger.set_step(2);
  ledger.add_loopback_seconds(0.25);
  ledger.add_loopback_seconds(0.125);
  ledger.set_optimizer_phase();
  ledger.add_loopback_seconds(1.0);
  ledger.set_step(3);
  ledger.add_loopback_seconds(2.0);
  const std::vector<LoopbackTime> t = ledger.loopback_times();
  ASSERT_EQ(t.size(), 4u);
  EXPECT_EQ(std::tie(t[0].step, t[0].phase, t[0].seconds), std::make_tuple(int64_t{-1}, std::string("outside"), 0.5));
  EXPECT_EQ(std::tie(t[1].step, t[1].phase, t[1].seconds), std::make_tuple(int64_t{2}, std::string("optimizer"), 1.0));
  EXPECT_EQ(std::tie(t[2].step, t[2].phase, t[2].seconds), std::make_tuple(int64_t{2}, std::string("passes"), 0.375));
  EXPECT_EQ(std::tie(t[3].step, t[3].phase, t[3].seconds), std::make_tuple(int64_t{3}, std::string("passes"), 2.0));
}

TEST(CountingComm, StartedFormsCountAndStillRun) {
  Counted c(2, 0);
  Tensor in = Tensor::zeros({4}, DType::F32), out = Tensor::zeros({8}, DType::F32);
  in.data_as<float>()[0] = 5;
  c.comm.start_all_gather(in, out)->wait();
  EXPECT_EQ(out.data_as<float>()[4], 5);  // the loopback's replicate ran through the decorator
  c.comm.start_reduce_scatter(out, in, ReduceOp::Sum)->wait();
  c.comm.start_all_to_all(out, {4, 4}, Tensor::zeros({8}, DType::F32), {4, 4})->wait();
  const auto rows = c.ledger->rows();
  EXPECT_EQ(find(rows, -1, "world", "all_gather")->sent_bytes, 16);
  EXPECT_EQ(find(rows, -1, "world", "reduce_scatter")->recv_bytes, 16);
  EXPECT_EQ(find(rows, -1, "world", "all_to_all")->sent_bytes, 16);
}

TEST(CountingComm, OneRankGroupsMoveNothing) {
  EXPECT_EQ(ring_all_reduce_bytes(1000, 1), 0);
  EXPECT_EQ(ring_gather_bytes(1000, 1), 0);
  EXPECT_EQ(ring_all_reduce_bytes(1000, 8), 1750);
  EXPECT_EQ(ring_gather_bytes(1000, 8), 875);
}

}  // namespace
}  // namespace quill
