// LoopbackComm (comm/loopback_comm.h): every collective's result, sizes and the fill pattern, and the
// argument checks it shares with the real communicators. One process, no MPI.
#include "comm/loopback_comm.h"

#include <gtest/gtest.h>

#include <numeric>
#include <set>

#include "base/error.h"

namespace quill {
namespace {

LoopbackComm loopback(int size, int rank) { return LoopbackComm(size, rank, "world", make_host_loopback_mover()); }

Tensor iota(int64_t n, float first = 0) {
  Tensor t = Tensor::empty({n}, DType::F32);
  for (int64_t i = 0; i < n; ++i) t.data_as<float>()[i] = first + static_cast<float>(i);
  return t;
}

std::vector<float> values(const Tensor& t) { return std::vector<float>(t.data_as<float>(), t.data_as<float>() + t.numel()); }

TEST(LoopbackComm, AllReduceLeavesTheLocalValues) {
  LoopbackComm c = loopback(4, 1);
  Tensor t = iota(5, 1);
  c.all_reduce(t, ReduceOp::Sum);
  EXPECT_EQ(values(t), (std::vector<float>{1, 2, 3, 4, 5}));
  c.all_reduce(t, ReduceOp::Max);
  EXPECT_EQ(values(t), (std::vector<float>{1, 2, 3, 4, 5}));
}

TEST(LoopbackComm, ReduceScatterTakesThisRanksBlock) {
  LoopbackComm c = loopback(4, 2);
  Tensor in = iota(12), out = Tensor::zeros({3}, DType::F32);
  c.reduce_scatter(in, out, ReduceOp::Sum);
  EXPECT_EQ(values(out), (std::vector<float>{6, 7, 8}));
  // In place (out is in's own block): left as it is.
  Tensor own = in.view_flat(6, {3});
  c.reduce_scatter(in, own, ReduceOp::Sum);
  EXPECT_EQ(values(own), (std::vector<float>{6, 7, 8}));
}

TEST(LoopbackComm, AllGatherReplicatesIntoEveryBlock) {
  LoopbackComm c = loopback(3, 1);
  Tensor in = iota(2, 1), out = Tensor::zeros({6}, DType::F32);
  c.all_gather(in, out);
  EXPECT_EQ(values(out), (std::vector<float>{1, 2, 1, 2, 1, 2}));
  // In place: the input is out's block 1; the other blocks keep what they held (the peers' shards).
  Tensor buf = Tensor::zeros({6}, DType::F32);
  buf.data_as<float>()[0] = 3, buf.data_as<float>()[2] = 7, buf.data_as<float>()[3] = 8, buf.data_as<float>()[5] = 9;
  c.all_gather(buf.view_flat(2, {2}), buf);
  EXPECT_EQ(values(buf), (std::vector<float>{3, 0, 7, 8, 0, 9}));
}

TEST(LoopbackComm, AllToAllDeliversTheRotatedBlocks) {
  LoopbackComm c = loopback(3, 1);
  // Source q delivers the block for rank (2 * 1 - q) mod 3: q 0 -> 2, q 1 -> 1 (its own), q 2 -> 0.
  EXPECT_EQ(c.all_to_all_block_from(0), 2);
  EXPECT_EQ(c.all_to_all_block_from(1), 1);
  EXPECT_EQ(c.all_to_all_block_from(2), 0);
  Tensor in = Tensor::empty({6}, DType::F32);
  const float blocks[] = {10, 20, 21, 30, 31, 32};  // 1 row for rank 0, 2 for rank 1, 3 for rank 2
  std::copy(blocks, blocks + 6, in.data_as<float>());
  Tensor out = Tensor::zeros({8}, DType::F32);
  c.all_to_all(in, {1, 2, 3}, out, {3, 2, 1});
  EXPECT_EQ(values(out.view_flat(0, {6})), (std::vector<float>{30, 31, 32, 20, 21, 10}));
  // More asked from a source than its block holds: the rest is the fill pattern.
  const float p0 = loopback_pattern(DType::F32, 1).data_as<float>()[0];
  c.all_to_all(in, {1, 2, 3}, out, {4, 2, 1});
  EXPECT_EQ(values(out.view_flat(0, {7})), (std::vector<float>{30, 31, 32, p0, 20, 21, 10}));
}

TEST(LoopbackComm, AllToAllBlockRuleIsAPermutationForEveryRank) {
  // So a rank receives in total what it sends, and a count exchange then the data exchange agree.
  for (int p = 1; p <= 8; ++p)
    for (int r = 0; r < p; ++r) {
      LoopbackComm c = loopback(p, r);
      std::set<int> seen;
      for (int q = 0; q < p; ++q) seen.insert(c.all_to_all_block_from(q));
      EXPECT_EQ(static_cast<int>(seen.size()), p);
      EXPECT_EQ(c.all_to_all_block_from(r), r);
    }
}

TEST(LoopbackComm, CountExchangeThenDataExchangeAgree) {
  // An expert dispatch: counts per destination first (one count each), then rows of 2 elements.
  LoopbackComm c = loopback(4, 3);
  Tensor counts = Tensor::empty({4}, DType::I64), got = Tensor::zeros({4}, DType::I64);
  const int64_t rows[] = {1, 0, 2, 3};
  std::copy(rows, rows + 4, counts.data_as<int64_t>());
  c.all_to_all(counts, {1, 1, 1, 1}, got, {1, 1, 1, 1});
  std::vector<int64_t> send, recv;
  for (int r = 0; r < 4; ++r) send.push_back(2 * rows[r]), recv.push_back(2 * got.data_as<int64_t>()[r]);
  const int64_t total = std::accumulate(send.begin(), send.end(), int64_t{0});
  EXPECT_EQ(std::accumulate(recv.begin(), recv.end(), int64_t{0}), total);
  Tensor in = iota(total, 100), out = Tensor::zeros({total}, DType::F32);
  c.all_to_all(in, send, out, recv);
  // Every received row is a sent row (no pattern): values 100..111 each once.
  std::vector<float> v = values(out);
  std::sort(v.begin(), v.end());
  EXPECT_EQ(v, values(iota(total, 100)));
}

TEST(LoopbackComm, RecvFillsADeterministicPattern) {
  LoopbackComm c = loopback(2, 1);
  Tensor a = Tensor::zeros({4096}, DType::F32), b = Tensor::zeros({4096}, DType::F32);
  c.recv(a, 0);
  c.recv(b, 0);
  EXPECT_EQ(values(a), values(b));
  std::set<float> distinct;
  for (float x : values(a)) {
    EXPECT_GE(x, -0.5f);
    EXPECT_LT(x, 0.5f);
    distinct.insert(x);
  }
  EXPECT_GT(distinct.size(), 4000u);  // not a constant: routers see varied rows
  Tensor h = Tensor::zeros({8}, DType::BF16);
  c.recv(h, 0);
  EXPECT_NE(h.data_as<uint16_t>()[0] | h.data_as<uint16_t>()[1], 0);
  Tensor ids = Tensor::empty({8}, DType::I32);
  std::fill(ids.data_as<int32_t>(), ids.data_as<int32_t>() + 8, 5);
  c.recv(ids, 0);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(ids.data_as<int32_t>()[i], 0);
}

TEST(LoopbackComm, SendRecvCopiesWhatIsSentWhenTheSizesAgree) {
  LoopbackComm c = loopback(4, 2);
  Tensor s = iota(6, 1), r = Tensor::zeros({2, 3}, DType::F32);
  c.send_recv(s, 3, r, 1);
  EXPECT_EQ(values(r), values(s));
  Tensor other = Tensor::zeros({4}, DType::F32);
  c.send_recv(s, 3, other, 1);
  EXPECT_EQ(values(other), values(loopback_pattern(DType::F32, 4)));
  c.send(s, 0);  // nothing happens, nothing waits
  c.barrier();
}

TEST(LoopbackComm, SplitGivesTheGroupsSizeAndThisRanksIndex) {
  LoopbackComm c = loopback(8, 5);
  std::unique_ptr<Comm> tp = c.split({4, 5}, "tp");
  EXPECT_EQ(tp->size(), 2);
  EXPECT_EQ(tp->rank(), 1);
  EXPECT_EQ(tp->name(), "tp");
  std::unique_ptr<Comm> dp = c.split({7, 5, 3, 1}, "dp");  // list order numbers the ranks
  EXPECT_EQ(dp->size(), 4);
  EXPECT_EQ(dp->rank(), 1);
  EXPECT_THROW(c.split({0, 1}, "pp"), Error);
}

TEST(LoopbackComm, BadArgumentsThrowNamingTheCommunicator) {
  LoopbackComm c = loopback(4, 0);
  Tensor in = iota(3), out = Tensor::zeros({10}, DType::F32);
  try {
    c.all_gather(in, out);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("loopback comm 'world' (rank 0 of 4): all_gather: output"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(c.recv(in, 4), Error);
  EXPECT_THROW(c.all_to_all(in, {1, 1, 1}, out, {1, 1, 1, 1}), Error);
  EXPECT_THROW(LoopbackComm(2, 2, "x", make_host_loopback_mover()), Error);
}

// A mover that counts the spans it is given around the host mover's copies (their time is the host's).
class SpanCountingMover final : public LoopbackMover {
 public:
  Device device() const override { return Device::CPU; }
  void copy(const Tensor& dst, size_t dst_offset, const Tensor& src, size_t src_offset, size_t bytes) override {
    EXPECT_GT(depth_, 0) << "a copy outside a span";
    host_->copy(dst, dst_offset, src, src_offset, bytes);
  }
  void fill(const Tensor& dst, int64_t first, int64_t count) override {
    EXPECT_GT(depth_, 0) << "a fill outside a span";
    host_->fill(dst, first, count);
  }
  void to_host(void* dst, const Tensor& src, size_t bytes) override { host_->to_host(dst, src, bytes); }
  void from_host(const Tensor& dst, const void* src, size_t bytes) override { host_->from_host(dst, src, bytes); }
  void begin_span() override {
    ++depth_, ++spans;
    host_->begin_span();
  }
  void end_span() override {
    --depth_;
    host_->end_span();
  }
  double take_span_seconds() override { return host_->take_span_seconds(); }
  int spans = 0;

 private:
  std::unique_ptr<LoopbackMover> host_ = make_host_loopback_mover();
  int depth_ = 0;
};

TEST(LoopbackComm, EveryCollectiveThatMovesDataIsOneSpanOfTheMoversTime) {
  auto mover = std::make_shared<SpanCountingMover>();
  LoopbackComm c(4, 1, "world", mover);
  std::unique_ptr<Comm> tp = c.split({0, 1}, "tp");  // a split shares the mover, and its time
  Tensor in = iota(1 << 20), out = Tensor::zeros({4 << 20}, DType::F32), block = Tensor::zeros({1 << 18}, DType::F32);
  c.all_reduce(in, ReduceOp::Sum);  // moves nothing: no span
  c.broadcast(in, 0);
  c.send(in, 2);
  EXPECT_EQ(mover->spans, 0);
  EXPECT_EQ(mover->take_span_seconds(), 0.0);
  c.all_gather(in, out);
  c.reduce_scatter(in, block, ReduceOp::Sum);
  c.all_to_all(in, {1 << 18, 1 << 18, 1 << 18, 1 << 18}, out.view_flat(0, {1 << 20}), {1 << 18, 1 << 18, 1 << 18, 1 << 18});
  c.recv(block, 0);
  c.send_recv(block, 2, Tensor::zeros({1 << 18}, DType::F32), 0);
  tp->all_gather(in, out.view_flat(0, {2 << 20}));
  EXPECT_EQ(mover->spans, 6);
  const double seconds = mover->take_span_seconds();
  EXPECT_GT(seconds, 0.0);  // ~24 MB copied
  EXPECT_EQ(mover->take_span_seconds(), 0.0) << "taken once";
  // In place (ZeRO-1's gather, the owned block of reduce-scatter): nothing moves, no span.
  c.all_gather(out.view_flat(1 << 20, {1 << 20}), out);
  c.reduce_scatter(out, out.view_flat(1 << 20, {1 << 20}), ReduceOp::Sum);
  EXPECT_EQ(mover->spans, 6);
}

}  // namespace
}  // namespace quill
