// NcclComm on the GPUs of one machine, one thread per GPU (up to 4) in one process, so that no
// launcher is needed: every collective against exact expected values, on odd sizes and several
// dtypes, in-place forms, uneven all-to-all-v, the send/recv ring, sub-communicators from a Grid,
// and local argument errors. Skips without two GPUs.
#include <gtest/gtest.h>

#include <numeric>
#include <thread>

#include "comm/nccl/nccl_comm.h"
#include "nccl_test_util.h"
#include "parallel/grid.h"
#include "../tensor_values.h"

namespace quill::test {
namespace {

int gpus_for_test() { return std::min(cuda_device_count(), 4); }

// Runs body(comm, gpu allocator) on one thread per GPU, each with its rank of a world NcclComm.
void on_gpus(const std::function<void(NcclComm&, Allocator&)>& body) {
  const int n = gpus_for_test();
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      cudaSetDevice(r);
      cudaStream_t stream;
      cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
      CudaMallocAllocator gpu;
      CommOptions options;
      options.timeout_s = 60;
      options.on_error = CommOptions::OnError::Throw;
      try {
        NcclComm comm(id, n, r, stream, options, "world");
        body(comm, gpu);
      } catch (const std::exception& e) {
        ADD_FAILURE() << "rank " << r << ": " << e.what();
      }
      cudaStreamDestroy(stream);
    });
  for (auto& t : threads) t.join();
}

#define REQUIRE_TWO_GPUS() \
  if (gpus_for_test() < 2) GTEST_SKIP() << "needs two GPUs (found " << cuda_device_count() << ")"

bool is_float(DType d) { return d == DType::F32 || d == DType::F64 || d == DType::BF16 || d == DType::F16; }

double value(DType d, int r, int64_t i) {
  if (d == DType::U8) return (r + 1) * (i % 5) + r;
  const double v = (r + 1) * (i % 7 + 1) - 3 * r - 2;
  return is_float(d) ? v * 0.5 : v;
}

void expect_values(const Tensor& host, const std::function<double(int64_t)>& want, const std::string& what, int rank) {
  int bad = 0;
  for (int64_t i = 0; i < host.numel() && bad < 5; ++i)
    if (element(host, i) != want(i)) {
      ADD_FAILURE() << "rank " << rank << ": " << what << " " << dtype_name(host.dtype()) << " element " << i << ": got "
                    << element(host, i) << ", want " << want(i);
      ++bad;
    }
}

TEST(NcclComm, AllReduceSumAndMax) {
  REQUIRE_TWO_GPUS();
  on_gpus([](NcclComm& c, Allocator& gpu) {
    EXPECT_EQ(c.device(), Device::CUDA);
    for (DType d : {DType::F32, DType::F64, DType::BF16, DType::F16, DType::I32, DType::I64, DType::U8})
      for (int64_t n : {1, 37, 100003}) {
        Tensor t = to_device(make_tensor(d, n, [&](int64_t i) { return value(d, c.rank(), i); }), gpu);
        c.all_reduce(t, ReduceOp::Sum);
        expect_values(to_host(t, c.stream()), [&](int64_t i) {
          double s = 0;
          for (int r = 0; r < c.size(); ++r) s += value(d, r, i);
          return s;
        }, "all_reduce sum", c.rank());
        Tensor m = to_device(make_tensor(d, n, [&](int64_t i) { return value(d, (c.rank() + i) % c.size(), i); }), gpu);
        c.all_reduce(m, ReduceOp::Max);
        expect_values(to_host(m, c.stream()), [&](int64_t i) {
          double best = -1e300;
          for (int r = 0; r < c.size(); ++r) best = std::max(best, value(d, (r + i) % c.size(), i));
          return best;
        }, "all_reduce max", c.rank());
      }
  });
}

TEST(NcclComm, ReduceScatterAndAllGather) {
  REQUIRE_TWO_GPUS();
  on_gpus([](NcclComm& c, Allocator& gpu) {
    const int n = c.size(), me = c.rank();
    for (DType d : {DType::F32, DType::BF16, DType::I64})
      for (int64_t block : {1, 5, 4099}) {
        auto want_rs = [&](int64_t j) {
          double s = 0;
          for (int r = 0; r < n; ++r) s += value(d, r, me * block + j);
          return s;
        };
        Tensor in = to_device(make_tensor(d, n * block, [&](int64_t i) { return value(d, me, i); }), gpu);
        Tensor out = Tensor::empty({block}, d, gpu);
        c.reduce_scatter(in, out, ReduceOp::Sum);
        expect_values(to_host(out, c.stream()), want_rs, "reduce_scatter", me);
        c.reduce_scatter(in, in.rows(me * block, (me + 1) * block), ReduceOp::Sum);  // in place
        expect_values(to_host(in.rows(me * block, (me + 1) * block), c.stream()), want_rs, "reduce_scatter in place", me);

        auto want_ag = [&](int64_t k) { return value(d, static_cast<int>(k / block), k % block); };
        Tensor shard = to_device(make_tensor(d, block, [&](int64_t i) { return value(d, me, i); }), gpu);
        Tensor full = Tensor::empty({n * block}, d, gpu);
        c.all_gather(shard, full);
        expect_values(to_host(full, c.stream()), want_ag, "all_gather", me);
        Tensor buf = to_device(make_tensor(d, n * block, [&](int64_t k) { return k / block == me ? want_ag(k) : 0; }), gpu);
        c.all_gather(buf.rows(me * block, (me + 1) * block), buf);  // in place
        expect_values(to_host(buf, c.stream()), want_ag, "all_gather in place", me);
      }
  });
}

int64_t a2a_count(int s, int d) { return (s + 2 * d + 1) % 4 * 3; }
double a2a_value(int s, int d, int64_t k) { return s * 64 + d * 16 + k; }

TEST(NcclComm, AllToAllVUnevenCountsBroadcastAndRing) {
  REQUIRE_TWO_GPUS();
  on_gpus([](NcclComm& c, Allocator& gpu) {
    const int n = c.size(), me = c.rank();
    for (DType d : {DType::BF16, DType::F32, DType::I64}) {
      std::vector<int64_t> sc(n), rc(n);
      for (int r = 0; r < n; ++r) sc[r] = a2a_count(me, r), rc[r] = a2a_count(r, me);
      const int64_t st = std::accumulate(sc.begin(), sc.end(), int64_t{0});
      const int64_t rt = std::accumulate(rc.begin(), rc.end(), int64_t{0});
      Tensor host_in = Tensor::zeros({st + 1}, d);
      for (int r = 0, off = 0; r < n; off += static_cast<int>(sc[r]), ++r)
        for (int64_t k = 0; k < sc[r]; ++k) set_element(host_in, off + k, a2a_value(me, r, k));
      Tensor out = to_device(make_tensor(d, rt + 2, [](int64_t) { return 7; }), gpu);
      c.all_to_all(to_device(host_in, gpu), sc, out, rc);
      Tensor got = to_host(out, c.stream());
      for (int r = 0, off = 0; r < n; off += static_cast<int>(rc[r]), ++r)
        for (int64_t k = 0; k < rc[r]; ++k) EXPECT_EQ(element(got, off + k), a2a_value(r, me, k)) << "rank " << me << " from " << r;
      EXPECT_EQ(element(got, rt), 7);
    }
    Tensor b = to_device(make_tensor(DType::F32, 41, [&](int64_t i) { return value(DType::F32, me, i); }), gpu);
    c.broadcast(b, n - 1);
    expect_values(to_host(b, c.stream()), [&](int64_t i) { return value(DType::F32, n - 1, i); }, "broadcast", me);

    const int next = (me + 1) % n, prev = (me + n - 1) % n;
    Tensor send = to_device(make_tensor(DType::BF16, 19, [&](int64_t i) { return value(DType::BF16, me, i); }), gpu);
    Tensor recv = Tensor::empty({19}, DType::BF16, gpu);
    c.send_recv(send, next, recv, prev);
    expect_values(to_host(recv, c.stream()), [&](int64_t i) { return value(DType::BF16, prev, i); }, "ring", me);
    if (n % 2 == 0) {  // lone sends and receives, paired in a deadlock-free order
      const int partner = me ^ 1;
      Tensor theirs = Tensor::empty({19}, DType::BF16, gpu);
      if (me % 2 == 0) c.send(send, partner), c.recv(theirs, partner);
      else c.recv(theirs, partner), c.send(send, partner);
      expect_values(to_host(theirs, c.stream()), [&](int64_t i) { return value(DType::BF16, partner, i); }, "send/recv", me);
    }
    c.barrier();
  });
}

TEST(NcclComm, GridGroupsBySplit) {
  REQUIRE_TWO_GPUS();
  on_gpus([](NcclComm& c, Allocator& gpu) {
    LayoutSpec s;
    s.tp = c.size() % 2 == 0 ? 2 : 1;
    s.dp = c.size() / s.tp;
    s.ep = s.dp;
    const Grid grid(c.size(), s);
    for (GroupKind kind : {GroupKind::TP, GroupKind::DP, GroupKind::EP, GroupKind::EDP}) {
      const RankGroup g = grid.group(kind, c.rank());
      std::unique_ptr<Comm> sub = c.split(g.ranks, group_kind_name(kind));
      EXPECT_EQ(sub->size(), g.size());
      EXPECT_EQ(sub->rank(), g.index);
      Tensor t = to_device(make_tensor(DType::F32, 13, [&](int64_t i) { return (c.rank() + 1) * (i + 1); }), gpu);
      sub->all_reduce(t, ReduceOp::Sum);
      double members = 0;
      for (int r : g.ranks) members += r + 1;
      expect_values(to_host(t, c.stream()), [&](int64_t i) { return members * (i + 1); }, group_kind_name(kind), c.rank());
    }
  });
}

// split_isolated (the experts' exchange, docs/decisions/expert-exchange-stream.md): a communication
// stream of its own, apart from the parent's and a plain split's; its operations still follow the
// compute stream's earlier work (the input is written there just before) and complete against a
// reduce-scatter started on another communicator in the opposite order on every other rank.
TEST(NcclComm, IsolatedSplitHasItsOwnStreamAndOrdersAfterCompute) {
  REQUIRE_TWO_GPUS();
  on_gpus([](NcclComm& c, Allocator& gpu) {
    const int n = c.size(), me = c.rank();
    std::vector<int> everyone(n);
    std::iota(everyone.begin(), everyone.end(), 0);
    std::unique_ptr<Comm> dp = c.split(everyone, "dp-cp"), ep = c.split_isolated(everyone, "ep");
    auto* dp_nccl = dynamic_cast<NcclComm*>(dp.get());
    auto* ep_nccl = dynamic_cast<NcclComm*>(ep.get());
    ASSERT_NE(dp_nccl, nullptr);
    ASSERT_NE(ep_nccl, nullptr);
    EXPECT_EQ(dp_nccl->comm_stream(), c.comm_stream());
    EXPECT_NE(ep_nccl->comm_stream(), c.comm_stream());
    EXPECT_EQ(ep_nccl->stream(), c.stream());  // the same compute stream

    const int64_t big = 1 << 22;  // long enough that an unordered read would see the old values
    Tensor host_tokens = make_tensor(DType::F32, big * n, [&](int64_t i) { return 10 * me + i / big; });
    Tensor tokens = Tensor::zeros({big * n}, DType::F32, gpu);
    Tensor got = Tensor::zeros({big * n}, DType::F32, gpu);
    Tensor grads = to_device(make_tensor(DType::F32, 3 * n, [&](int64_t i) { return (me + 1) * (i + 1); }), gpu);
    Tensor owned = Tensor::empty({3}, DType::F32, gpu);
    cudaMemcpyAsync(tokens.data(), host_tokens.data(), tokens.nbytes(), cudaMemcpyHostToDevice, c.stream());
    const std::vector<int64_t> counts(n, big);
    std::unique_ptr<CommHandle> a, b;
    if (me % 2 == 0) {
      a = ep->start_all_to_all(tokens, counts, got, counts);
      b = dp->start_reduce_scatter(grads, owned, ReduceOp::Sum);
    } else {
      b = dp->start_reduce_scatter(grads, owned, ReduceOp::Sum);
      a = ep->start_all_to_all(tokens, counts, got, counts);
    }
    a->wait();
    b->wait();
    expect_values(to_host(got, c.stream()), [&](int64_t i) { return 10 * (i / big) + me; }, "isolated all_to_all", me);
    expect_values(to_host(owned, c.stream()), [&](int64_t i) { return n * (n + 1) / 2.0 * (3 * me + i + 1); },
                  "reduce_scatter beside it", me);
  });
}

TEST(NcclComm, LocalArgumentErrors) {
  REQUIRE_TWO_GPUS();
  on_gpus([](NcclComm& c, Allocator& gpu) {
    auto error_of = [](const std::function<void()>& f) -> std::string {
      try {
        f();
      } catch (const Error& e) {
        return e.what();
      }
      return "";
    };
    Tensor cpu = Tensor::zeros({4}, DType::F32);
    EXPECT_NE(error_of([&] { c.all_reduce(cpu, ReduceOp::Sum); }).find("this communicator moves cuda tensors"),
              std::string::npos);
    Tensor in = Tensor::empty({static_cast<int64_t>(c.size()) * 3 + 1}, DType::F32, gpu), out = Tensor::empty({3}, DType::F32, gpu);
    EXPECT_NE(error_of([&] { c.reduce_scatter(in, out, ReduceOp::Sum); }).find("must hold"), std::string::npos);
    EXPECT_NE(error_of([&] { c.send(out, c.rank()); }).find("cannot send to itself"), std::string::npos);
    c.barrier();
  });
}

}  // namespace
}  // namespace quill::test
