// MpiComm under mpirun (any number of ranks; CTest runs 2 and 4): every collective against exact
// expected values on odd sizes and several dtypes, in-place forms, uneven all-to-all-v, the
// point-to-point ring, and the failures every rank detects (with the Throw policy).
//
// Values are small integers and halves, exact in every dtype (BF16 included), so sums over four
// ranks compare exactly; they depend on rank and index so that no rank's data is all equal.
#include <gtest/gtest.h>

#include <numeric>

#include "base/error.h"
#include "mpi_test_env.h"
#include "util/test_util.h"

namespace quill::test {
namespace {

const std::vector<DType> kReduceTypes = {DType::F32, DType::F64, DType::BF16, DType::F16, DType::I32, DType::I64, DType::U8};
const std::vector<DType> kMoveTypes = {DType::F32, DType::F64, DType::BF16, DType::I32, DType::I64, DType::U8, DType::Bool};

bool is_float(DType d) { return d == DType::F32 || d == DType::F64 || d == DType::BF16 || d == DType::F16; }

// Element i of rank r: a small, signed (for signed dtypes), non-constant value.
double value(DType d, int r, int64_t i) {
  if (d == DType::Bool) return (r + i) % 2;
  if (d == DType::U8) return (r + 1) * (i % 5) + r;
  const double v = (r + 1) * (i % 7 + 1) - 3 * r - 2;
  return is_float(d) ? v * 0.5 : v;
}

void expect_values(const Tensor& t, const std::function<double(int64_t)>& want, const std::string& what) {
  int bad = 0;
  for (int64_t i = 0; i < t.numel() && bad < 5; ++i)
    if (element(t, i) != want(i)) {
      ADD_FAILURE() << what << " " << dtype_name(t.dtype()) << " element " << i << ": got " << element(t, i) << ", want "
                    << want(i);
      ++bad;
    }
}

TEST(MpiComm, Identity) {
  MpiComm& w = mpi_world();
  EXPECT_GE(w.size(), 1);
  EXPECT_EQ(w.device(), Device::CPU);
  EXPECT_EQ(w.name(), "world");
  int r = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  EXPECT_EQ(w.rank(), r);
}

TEST(MpiComm, AllReduceSumAndMax) {
  MpiComm& w = mpi_world();
  for (DType d : kReduceTypes)
    for (int64_t n : {1, 37, 1001}) {
      Tensor t = make_tensor(d, n, [&](int64_t i) { return value(d, w.rank(), i); });
      w.all_reduce(t, ReduceOp::Sum);
      expect_values(t, [&](int64_t i) {
        double s = 0;
        for (int r = 0; r < w.size(); ++r) s += value(d, r, i);
        return s;
      }, "all_reduce sum");
      // Flip signs per rank and element so that the maximum comes from different ranks.
      auto signed_value = [&](int r, int64_t i) { return d == DType::U8 || (r + i) % 2 ? value(d, r, i) : -value(d, r, i); };
      Tensor m = make_tensor(d, n, [&](int64_t i) { return signed_value(w.rank(), i); });
      w.all_reduce(m, ReduceOp::Max);
      expect_values(m, [&](int64_t i) {
        double best = -1e300;
        for (int r = 0; r < w.size(); ++r) best = std::max(best, signed_value(r, i));
        return best;
      }, "all_reduce max");
    }
}

TEST(MpiComm, AllReduceEmptyTensor) {
  Tensor t = Tensor::empty({0}, DType::F32);
  mpi_world().all_reduce(t, ReduceOp::Sum);
}

TEST(MpiComm, ReduceScatter) {
  MpiComm& w = mpi_world();
  const int n = w.size();
  for (DType d : {DType::F32, DType::BF16, DType::I64, DType::F64})
    for (int64_t block : {1, 5, 333}) {
      Tensor in = make_tensor(d, n * block, [&](int64_t i) { return value(d, w.rank(), i); });
      Tensor out = Tensor::empty({block}, d);
      w.reduce_scatter(in, out, ReduceOp::Sum);
      auto want = [&](int64_t j) {
        double s = 0;
        for (int r = 0; r < n; ++r) s += value(d, r, w.rank() * block + j);
        return s;
      };
      expect_values(out, want, "reduce_scatter");
      // In place: the output is this rank's own block of the input.
      Tensor buf = make_tensor(d, n * block, [&](int64_t i) { return value(d, w.rank(), i); });
      w.reduce_scatter(buf, buf.rows(w.rank() * block, (w.rank() + 1) * block), ReduceOp::Sum);
      expect_values(buf.rows(w.rank() * block, (w.rank() + 1) * block), want, "reduce_scatter in place");
    }
  Tensor in = make_tensor(DType::F32, n * 3, [&](int64_t i) { return value(DType::F32, w.rank(), i); });
  Tensor out = Tensor::empty({3}, DType::F32);
  w.reduce_scatter(in, out, ReduceOp::Max);
  expect_values(out, [&](int64_t j) {
    double best = -1e300;
    for (int r = 0; r < n; ++r) best = std::max(best, value(DType::F32, r, w.rank() * 3 + j));
    return best;
  }, "reduce_scatter max");
}

TEST(MpiComm, AllGather) {
  MpiComm& w = mpi_world();
  const int n = w.size();
  for (DType d : kMoveTypes)
    for (int64_t block : {1, 3, 257}) {
      Tensor in = make_tensor(d, block, [&](int64_t i) { return value(d, w.rank(), i); });
      Tensor out = Tensor::empty({n * block}, d);
      w.all_gather(in, out);
      auto want = [&](int64_t k) { return value(d, static_cast<int>(k / block), k % block); };
      expect_values(out, want, "all_gather");
      Tensor buf = Tensor::zeros({n * block}, d);
      Tensor mine = buf.rows(w.rank() * block, (w.rank() + 1) * block);
      for (int64_t i = 0; i < block; ++i) set_element(mine, i, value(d, w.rank(), i));
      w.all_gather(mine, buf);
      expect_values(buf, want, "all_gather in place");
    }
}

// Rank s sends (s + 2 d + 1) % 4 elements to rank d (zeros included); element k of that message is
// s * 16 + d * 4 + k, exact in BF16.
int64_t a2a_count(int s, int d) { return (s + 2 * d + 1) % 4; }
double a2a_value(int s, int d, int64_t k) { return s * 16 + d * 4 + k; }

TEST(MpiComm, AllToAllVUnevenCounts) {
  MpiComm& w = mpi_world();
  const int n = w.size(), me = w.rank();
  for (DType d : {DType::I64, DType::F32, DType::BF16, DType::I32}) {
    std::vector<int64_t> sc(n), rc(n);
    for (int r = 0; r < n; ++r) {
      sc[r] = a2a_count(me, r);
      rc[r] = a2a_count(r, me);
    }
    const int64_t send_total = std::accumulate(sc.begin(), sc.end(), int64_t{0});
    const int64_t recv_total = std::accumulate(rc.begin(), rc.end(), int64_t{0});
    Tensor in = Tensor::empty({send_total + 2}, d);  // capacity beyond the counts is allowed
    for (int r = 0, off = 0; r < n; off += static_cast<int>(sc[r]), ++r)
      for (int64_t k = 0; k < sc[r]; ++k) set_element(in, off + k, a2a_value(me, r, k));
    Tensor out = make_tensor(d, recv_total + 3, [](int64_t) { return 7; });
    w.all_to_all(in, sc, out, rc);
    for (int r = 0, off = 0; r < n; off += static_cast<int>(rc[r]), ++r)
      for (int64_t k = 0; k < rc[r]; ++k) EXPECT_EQ(element(out, off + k), a2a_value(r, me, k)) << "from rank " << r;
    for (int64_t i = recv_total; i < recv_total + 3; ++i) EXPECT_EQ(element(out, i), 7) << "past the counts";
  }
}

TEST(MpiComm, Broadcast) {
  MpiComm& w = mpi_world();
  for (int root : {0, w.size() - 1})
    for (DType d : {DType::F32, DType::I64, DType::BF16}) {
      Tensor t = make_tensor(d, 41, [&](int64_t i) { return value(d, w.rank(), i); });
      w.broadcast(t, root);
      expect_values(t, [&](int64_t i) { return value(d, root, i); }, "broadcast");
    }
}

TEST(MpiComm, SendRecvRing) {
  MpiComm& w = mpi_world();
  const int n = w.size(), me = w.rank();
  const int next = (me + 1) % n, prev = (me + n - 1) % n;
  for (DType d : {DType::F32, DType::I32, DType::BF16}) {
    Tensor send = make_tensor(d, 19, [&](int64_t i) { return value(d, me, i); });
    Tensor recv = Tensor::empty({19}, d);
    w.send_recv(send, next, recv, prev);
    expect_values(recv, [&](int64_t i) { return value(d, prev, i); }, "ring send_recv");
  }
  // Started: a whole ring all-gather of steps, each step's send the block the last one received (the
  // pipelined gather of --tp-comm-overlap), the rank's own work between start and wait.
  Tensor full = Tensor::empty({static_cast<int64_t>(n) * 7}, DType::F32);
  for (int64_t i = 0; i < 7; ++i) full.data_as<float>()[me * 7 + i] = static_cast<float>(value(DType::F32, me, i));
  for (int k = 0; k + 1 < n; ++k) {
    const int have = (me - k + n) % n, want = (me - k - 1 + 2 * n) % n;
    auto step = w.start_send_recv(full.rows(have * 7, have * 7 + 7), next, full.rows(want * 7, want * 7 + 7), prev);
    step->wait();
  }
  for (int r = 0; r < n; ++r)
    expect_values(full.rows(r * 7, r * 7 + 7), [&](int64_t i) { return value(DType::F32, r, i); }, "started ring");
  // Plain send/recv, paired so that it cannot deadlock: even ranks send first.
  if (n % 2 == 0) {
    const int partner = me % 2 == 0 ? me + 1 : me - 1;
    Tensor mine = make_tensor(DType::F64, 23, [&](int64_t i) { return value(DType::F64, me, i); });
    Tensor theirs = Tensor::empty({23}, DType::F64);
    if (me % 2 == 0) {
      w.send(mine, partner);
      w.recv(theirs, partner);
    } else {
      w.recv(theirs, partner);
      w.send(mine, partner);
    }
    expect_values(theirs, [&](int64_t i) { return value(DType::F64, partner, i); }, "send/recv");
  }
  w.barrier();
}

TEST(MpiComm, SplitHalves) {
  MpiComm& w = mpi_world();
  const int n = w.size(), half = (n + 1) / 2;
  std::vector<int> group;
  for (int r = 0; r < n; ++r)
    if ((r < half) == (w.rank() < half)) group.push_back(r);
  std::reverse(group.begin(), group.end());  // the new comm numbers ranks in list order
  std::unique_ptr<Comm> sub = w.split(group, "half");
  EXPECT_EQ(sub->size(), static_cast<int>(group.size()));
  EXPECT_EQ(group[sub->rank()], w.rank());
  EXPECT_EQ(sub->name(), "half");
  Tensor t = make_tensor(DType::I64, 3, [&](int64_t i) { return w.rank() * 10 + i; });
  sub->all_reduce(t, ReduceOp::Sum);
  int64_t s = 0;
  for (int r : group) s += r * 10;
  expect_values(t, [&](int64_t i) { return s + i * static_cast<int64_t>(group.size()); }, "all_reduce in split");
}

// --- failures every rank detects: with OnError::Throw each rank throws and the comm lives on ---

CommOptions throwing() {
  CommOptions o;
  o.timeout_s = 30;
  o.on_error = CommOptions::OnError::Throw;
  return o;
}

TEST(MpiCommErrors, MismatchedAllReduceSizeNamesRanksAndOperation) {
  MpiComm c(MPI_COMM_WORLD, "checked", throwing());
  if (c.size() < 2) GTEST_SKIP() << "needs two ranks";
  Tensor t = Tensor::zeros({c.rank() == 1 ? 12 : 10}, DType::F32);
  const std::string e = error_of([&] { c.all_reduce(t, ReduceOp::Sum); });
  EXPECT_NE(e.find(fmt::format("rank {} (rank {} of {} in comm 'checked')", c.rank(), c.rank(), c.size())), std::string::npos) << e;
  EXPECT_NE(e.find("different arguments"), std::string::npos) << e;
  EXPECT_NE(e.find("all_reduce of 12 F32 (sum) on rank 1"), std::string::npos) << e;
  EXPECT_NE(e.find("all_reduce of 10 F32 (sum) on rank"), std::string::npos) << e;
  // The communicator is still usable afterwards.
  Tensor ok = Tensor::zeros({4}, DType::F32);
  c.all_reduce(ok, ReduceOp::Sum);
}

TEST(MpiCommErrors, DifferentOperationsAndRoots) {
  MpiComm c(MPI_COMM_WORLD, "checked", throwing());
  if (c.size() < 2) GTEST_SKIP() << "needs two ranks";
  Tensor t = Tensor::zeros({5}, DType::I32);
  std::string e = error_of([&] { c.broadcast(t, c.rank() == 0 ? 0 : 1); });
  EXPECT_NE(e.find("broadcast of 5 I32 from root 0 on rank 0"), std::string::npos) << e;
  e = error_of([&] {
    if (c.rank() == 0) c.all_reduce(t, ReduceOp::Max);
    else c.all_reduce(t, ReduceOp::Sum);
  });
  EXPECT_NE(e.find("(max) on rank 0"), std::string::npos) << e;
  Tensor b = Tensor::zeros({5}, c.rank() == 0 ? DType::BF16 : DType::F32);
  e = error_of([&] { c.all_reduce(b, ReduceOp::Sum); });
  EXPECT_NE(e.find("all_reduce of 5 BF16 (sum) on rank 0"), std::string::npos) << e;
}

TEST(MpiCommErrors, AllToAllCountsThatDisagree) {
  MpiComm c(MPI_COMM_WORLD, "checked", throwing());
  if (c.size() < 2) GTEST_SKIP() << "needs two ranks";
  const int n = c.size();
  std::vector<int64_t> sc(n, 2), rc(n, 2);
  if (c.rank() == 1) rc[0] = 3;  // rank 0 sends 2 to rank 1, which expects 3
  Tensor in = Tensor::zeros({2 * n}, DType::F32), out = Tensor::zeros({2 * n + 1}, DType::F32);
  const std::string e = error_of([&] { c.all_to_all(in, sc, out, rc); });
  EXPECT_NE(e.find("rank 1 expects 3 elements from rank 0, which sends 2"), std::string::npos) << e;
}

TEST(MpiCommErrors, InvalidArgumentsOnEveryRank) {
  MpiComm c(MPI_COMM_WORLD, "checked", throwing());
  Tensor in = Tensor::zeros({c.size() * 3 + 1}, DType::F32), out = Tensor::zeros({3}, DType::F32);
  EXPECT_NE(error_of([&] { c.reduce_scatter(in, out, ReduceOp::Sum); }).find("reduce_scatter: input F32[" +
                                                                            std::to_string(c.size() * 3 + 1)),
            std::string::npos);
  Tensor g = Tensor::zeros({3}, DType::F32), gout = Tensor::zeros({3 * c.size()}, DType::I32);
  EXPECT_NE(error_of([&] { c.all_gather(g, gout); }).find("differ in dtype"), std::string::npos);
  Tensor flags = Tensor::zeros({2}, DType::Bool);
  EXPECT_NE(error_of([&] { c.all_reduce(flags, ReduceOp::Max); }).find("BOOL tensors cannot be reduced"), std::string::npos);
  EXPECT_NE(error_of([&] { c.broadcast(g, c.size()); }).find("peer rank"), std::string::npos);
  EXPECT_NE(error_of([&] { c.split({c.rank() == 0 ? 1 : 0}, "bad"); }).find("is not in the group"), std::string::npos);
  std::vector<int64_t> counts(c.size() + 1, 0);
  Tensor a = Tensor::zeros({3}, DType::F32), b = Tensor::zeros({3}, DType::F32);
  EXPECT_NE(error_of([&] { c.all_to_all(a, counts, b, counts); }).find("has " + std::to_string(c.size()) + " ranks"),
            std::string::npos);
  c.barrier();
}

}  // namespace
}  // namespace quill::test
