// TimedComm (comm/timed_comm.h) over a loopback communicator: every call is forwarded unchanged (the
// data is the loopback's, bit for bit) and gets one stand-in on the clock with the call's bytes as the
// ledger counts them, the group's world ranks through splits, blocking calls waited at once, started
// ones handed back; split_isolated takes an isolated clock. The host clock's queue arithmetic.
#include "comm/timed_comm.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <cstring>

#include "comm/loopback_comm.h"

namespace quill {
namespace {

struct Call {
  std::string group, op;
  std::vector<int> world_ranks;
  CallBytes bytes;
};

// Seconds = sent + recv bytes, so that a test can tell calls apart by their time.
class BytesTiming final : public StandInTiming {
 public:
  explicit BytesTiming(std::vector<Call>* calls) : calls_(calls) {}
  double seconds(const StandInCall& c) const override {
    calls_->push_back({c.group, c.op, *c.world_ranks, c.bytes});
    return static_cast<double>(c.bytes.sent + c.bytes.recv);
  }

 private:
  std::vector<Call>* calls_;
};

struct Occupied {
  int queue;
  double seconds;
  std::string op;
  bool waited = false;
};

// Records each stand-in and whether its handle was waited on; queue 0 is the first clock, each isolated one
// the next number.
class RecordingClock final : public StandInClock {
 public:
  RecordingClock(std::vector<Occupied>* log, int queue, int* queues) : log_(log), queue_(queue), queues_(queues) {}
  std::unique_ptr<CommHandle> occupy(double seconds, const CommSpanInfo& info) override {
    log_->push_back({queue_, seconds, info.op});
    struct Handle final : CommHandle {
      std::vector<Occupied>* log;
      size_t i;
      void wait() override { (*log)[i].waited = true; }
    };
    auto h = std::make_unique<Handle>();
    h->log = log_;
    h->i = log_->size() - 1;
    return h;
  }
  std::shared_ptr<StandInClock> isolated() override { return std::make_shared<RecordingClock>(log_, ++*queues_, queues_); }

 private:
  std::vector<Occupied>* log_;
  int queue_;
  int* queues_;
};

struct Timed {
  std::vector<Call> calls;
  std::vector<Occupied> log;
  int queues = 0;
  TimedComm comm;
  Timed(int size, int rank)
      : comm(std::make_unique<LoopbackComm>(size, rank, "world", make_host_loopback_mover()), everyone(size), rank,
             std::make_shared<BytesTiming>(&calls), std::make_shared<RecordingClock>(&log, 0, &queues)) {}
  static std::vector<int> everyone(int n) {
    std::vector<int> v(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) v[static_cast<size_t>(i)] = i;
    return v;
  }
};

Tensor ramp(int64_t n, DType dtype) {
  Tensor f = Tensor::empty({n}, DType::F32);
  for (int64_t i = 0; i < n; ++i) f.data_as<float>()[i] = static_cast<float>(i) * 0.25f - 3.0f;
  return dtype == DType::F32 ? f : convert_dtype(f, dtype);
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

TEST(TimedComm, DataIsTheLoopbacksAndEveryCallGetsItsStandIn) {
  Timed t(4, 1);
  LoopbackComm plain(4, 1, "world", make_host_loopback_mover());
  // The same calls on both: outputs equal bit for bit.
  Tensor in = ramp(8, DType::BF16), a = Tensor::zeros({2}, DType::BF16), b = Tensor::zeros({2}, DType::BF16);
  t.comm.reduce_scatter(in, a, ReduceOp::Sum);
  plain.reduce_scatter(in, b, ReduceOp::Sum);
  EXPECT_TRUE(same_bytes(a, b));
  Tensor g_in = ramp(3, DType::F32), g1 = Tensor::zeros({12}, DType::F32), g2 = Tensor::zeros({12}, DType::F32);
  t.comm.all_gather(g_in, g1);
  plain.all_gather(g_in, g2);
  EXPECT_TRUE(same_bytes(g1, g2));
  Tensor x = ramp(10, DType::F32), y1 = Tensor::zeros({10}, DType::F32), y2 = Tensor::zeros({10}, DType::F32);
  t.comm.all_to_all(x, {1, 2, 3, 4}, y1, {4, 2, 3, 1});
  plain.all_to_all(x, {1, 2, 3, 4}, y2, {4, 2, 3, 1});
  EXPECT_TRUE(same_bytes(y1, y2));
  Tensor r1 = Tensor::zeros({5}, DType::F32), r2 = Tensor::zeros({5}, DType::F32);
  t.comm.recv(r1, 0);
  plain.recv(r2, 0);
  EXPECT_TRUE(same_bytes(r1, r2));
  t.comm.all_reduce(ramp(100, DType::F32), ReduceOp::Sum);
  // One stand-in per call, blocking ones waited at once; the bytes are the ledger's (comm/call_bytes.h).
  ASSERT_EQ(t.log.size(), 5u);
  ASSERT_EQ(t.calls.size(), 5u);
  const char* ops[] = {"reduce_scatter", "all_gather", "all_to_all", "recv", "all_reduce"};
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(t.log[i].op, ops[i]);
    EXPECT_EQ(t.calls[i].op, ops[i]);
    EXPECT_TRUE(t.log[i].waited) << ops[i];
    EXPECT_EQ(t.log[i].queue, 0);
    EXPECT_EQ(t.calls[i].world_ranks, (std::vector<int>{0, 1, 2, 3}));
    EXPECT_EQ(t.log[i].seconds, static_cast<double>(t.calls[i].bytes.sent + t.calls[i].bytes.recv));
  }
  EXPECT_EQ(t.calls[0].bytes.payload, 16);  // 8 bf16: the whole buffer; 3/4 of it each way
  EXPECT_EQ(t.calls[0].bytes.sent, 12);
  EXPECT_EQ(t.calls[2].bytes.sent, (1 + 3 + 4) * 4);  // all but what rank 1 keeps
  EXPECT_EQ(t.calls[2].bytes.recv, (4 + 3 + 1) * 4);
  EXPECT_EQ(t.calls[3].bytes.recv, 20);
  EXPECT_EQ(t.calls[4].bytes.sent, 600);  // 2 * 3/4 * 400
}

TEST(TimedComm, StartedCallsHandBackTheirStandIn) {
  Timed t(2, 0);
  std::unique_ptr<CommHandle> h =
      t.comm.start_reduce_scatter(ramp(4, DType::F32), Tensor::zeros({2}, DType::F32), ReduceOp::Sum);
  ASSERT_EQ(t.log.size(), 1u);
  EXPECT_FALSE(t.log[0].waited);  // runs under whatever the caller does next
  h->wait();
  EXPECT_TRUE(t.log[0].waited);
  auto g = t.comm.start_all_gather(ramp(2, DType::F32), Tensor::zeros({4}, DType::F32));
  auto a = t.comm.start_all_to_all(ramp(2, DType::F32), {1, 1}, Tensor::zeros({2}, DType::F32), {1, 1});
  EXPECT_FALSE(t.log[1].waited);
  EXPECT_FALSE(t.log[2].waited);
}

TEST(TimedComm, SplitsKnowTheirWorldRanksAndIsolatedOnesTheirOwnQueue) {
  Timed t(8, 5);
  // Rank 5 of 8 in the odd ranks {1, 3, 5, 7}: index 2; then the pair {0, 2} of that group: world ranks 1 and 5.
  std::unique_ptr<Comm> odd = t.comm.split({1, 3, 5, 7}, "dp");
  ASSERT_EQ(odd->rank(), 2);
  std::unique_ptr<Comm> pair = odd->split({0, 2}, "tp");
  std::unique_ptr<Comm> ep = odd->split_isolated({2, 3}, "ep");
  pair->all_reduce(ramp(4, DType::F32), ReduceOp::Sum);
  ep->all_reduce(ramp(4, DType::F32), ReduceOp::Sum);
  odd->barrier();
  ASSERT_EQ(t.calls.size(), 3u);
  EXPECT_EQ(t.calls[0].group, "tp");
  EXPECT_EQ(t.calls[0].world_ranks, (std::vector<int>{1, 5}));
  EXPECT_EQ(t.calls[1].world_ranks, (std::vector<int>{5, 7}));
  EXPECT_EQ(t.calls[2].world_ranks, (std::vector<int>{1, 3, 5, 7}));
  EXPECT_EQ(t.log[0].queue, 0);
  EXPECT_EQ(t.log[1].queue, 1);  // the isolated split's clock
  EXPECT_EQ(t.log[2].queue, 0);
  // A group of one moves nothing: no time, whatever the model says.
  std::unique_ptr<Comm> alone = t.comm.split({5}, "solo");
  alone->all_reduce(ramp(4, DType::F32), ReduceOp::Sum);
  EXPECT_EQ(t.log.back().seconds, 0.0);
}

TEST(HostStandInClock, OperationsQueueOneAfterAnotherAndWaitsSleepUntilTheirEnd) {
  using Clock = std::chrono::steady_clock;
  std::shared_ptr<StandInClock> clock = make_host_standin_clock();
  std::shared_ptr<StandInClock> other = clock->isolated();
  const Clock::time_point t0 = Clock::now();
  auto a = clock->occupy(0.05, {});
  auto b = clock->occupy(0.05, {});   // after a on the same queue: ends ~0.10 s from t0
  auto c = other->occupy(0.05, {});   // its own queue: ends ~0.05 s from t0
  c->wait();
  const double after_c = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_GE(after_c, 0.05);  // (upper bounds would be flaky on a loaded machine)
  b->wait();
  const double after_b = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_GE(after_b, 0.10);
  a->wait();  // already over
  // The record, shared with the isolated queue: three spans, each group's own; the two waits that slept.
  const StandInRecord record = clock->record();
  ASSERT_EQ(record.spans.size(), 3u);
  EXPECT_LE(record.spans[0].end, record.spans[1].begin + 1e-9);  // one queue: b after a
  EXPECT_NEAR(record.spans[1].end - record.spans[1].begin, 0.05, 1e-6);
  EXPECT_EQ(record.waits.size(), 2u);  // a's wait found it over and did not sleep
  for (const auto& [begin, end] : record.waits) EXPECT_LT(begin, end);
  EXPECT_EQ(other->record().spans.size(), 3u);
}

TEST(HostStandInClock, WorkBetweenStartAndWaitIsHiddenInTheRecord) {
  std::shared_ptr<StandInClock> clock = make_host_standin_clock();
  auto handle = clock->occupy(0.08, CommSpanInfo{"tp", "reduce_scatter", 2, 0, 0});
  std::this_thread::sleep_for(std::chrono::milliseconds(30));  // the caller's own work
  handle->wait();
  const StandInRecord record = clock->record();
  ASSERT_EQ(record.spans.size(), 1u);
  ASSERT_EQ(record.waits.size(), 1u);
  EXPECT_EQ(record.spans[0].group, "tp");
  // The wait began after the work (>= 30 ms into the span) and ended with the span.
  EXPECT_GE(record.waits[0].first - record.spans[0].begin, 0.03);
  EXPECT_NEAR(record.waits[0].second, record.spans[0].end, 1e-9);
}

}  // namespace
}  // namespace quill
