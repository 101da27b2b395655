// The experts' token exchange does not share a queue with the gradients' reduce-scatter
// (docs/decisions/expert-exchange-stream.md), under mpirun: on a layout whose expert-parallel and
// data-parallel groups hold the same ranks, half the ranks start the reduce-scatter first and the
// all-to-all second, the other half the other way round, and both complete with the right values.
// Over one queue per rank (the operations run one after the other as started) the two halves would
// wait for each other until the deadline ended the job. The world here has a 20 s deadline.
#include <gtest/gtest.h>

#include "mpi_test_env.h"
#include "parallel/layout.h"

namespace quill::test {
namespace {

TEST(ExpertExchange, StartsInEitherOrderAgainstTheGradientReduceScatter) {
  CommOptions options;
  options.timeout_s = 20;
  MpiComm world(mpi_world().handle(), "world", options);
  const int n = world.size(), me = world.rank();
  LayoutSpec spec;
  spec.dp = n, spec.ep = n;  // ep over every rank; the dense gradients reduce over the same ranks
  const Layout layout = Layout::create(spec, /*num_layers=*/1, &world);
  Comm* ep = layout.comm(GroupKind::EP);
  Comm* dp = layout.comm(GroupKind::DP_CP);
  ASSERT_NE(ep, nullptr);
  ASSERT_NE(dp, nullptr);
  ASSERT_NE(ep, dp);

  // Gradient: rank r holds (r + 1) * (i + 1) over n blocks of 3; rank r owns block r's sum.
  Tensor grads = make_tensor(DType::F32, 3 * n, [&](int64_t i) { return (me + 1) * (i + 1); });
  Tensor owned = Tensor::empty({3}, DType::F32);
  // Tokens: rank r sends r + 1 + q elements of value 100 r + q to rank q.
  std::vector<int64_t> send(n), recv(n);
  int64_t send_total = 0, recv_total = 0;
  for (int q = 0; q < n; ++q) send[q] = me + 1 + q, recv[q] = q + 1 + me, send_total += send[q], recv_total += recv[q];
  Tensor tokens = Tensor::empty({send_total}, DType::F32), got = Tensor::zeros({recv_total}, DType::F32);
  for (int q = 0, at = 0; q < n; ++q)
    for (int64_t i = 0; i < send[q]; ++i) tokens.data_as<float>()[at++] = static_cast<float>(100 * me + q);

  std::unique_ptr<CommHandle> first, second;
  if (me % 2 == 0) {
    first = dp->start_reduce_scatter(grads, owned, ReduceOp::Sum);
    second = ep->start_all_to_all(tokens, send, got, recv);
  } else {
    first = ep->start_all_to_all(tokens, send, got, recv);
    second = dp->start_reduce_scatter(grads, owned, ReduceOp::Sum);
  }
  first->wait();
  second->wait();

  const double ranks_sum = n * (n + 1) / 2.0;
  for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(element(owned, i), ranks_sum * (3 * me + i + 1)) << "element " << i;
  for (int s = 0, at = 0; s < n; ++s)
    for (int64_t i = 0; i < recv[s]; ++i, ++at) EXPECT_EQ(element(got, at), 100 * s + me) << "from rank " << s;
}

// The started all-gather completes against a started all-to-all on another group alike.
TEST(ExpertExchange, StartedAllGatherAndAllToAllCompleteInEitherOrder) {
  CommOptions options;
  options.timeout_s = 20;
  MpiComm world(mpi_world().handle(), "world", options);
  const int n = world.size(), me = world.rank();
  LayoutSpec spec;
  spec.dp = n, spec.ep = n;
  const Layout layout = Layout::create(spec, 1, &world);
  Tensor shard = make_tensor(DType::BF16, 2, [&](int64_t i) { return 4 * me + i; });
  Tensor all = Tensor::empty({2 * n}, DType::BF16);
  const std::vector<int64_t> one(n, 1);
  Tensor mine = make_tensor(DType::I64, n, [&](int64_t q) { return 10 * me + q; }), theirs = Tensor::zeros({n}, DType::I64);
  Comm* ep = layout.comm(GroupKind::EP);
  Comm* dp = layout.comm(GroupKind::DP_CP);
  std::unique_ptr<CommHandle> a, b;
  if (me % 2 == 1) {
    a = dp->start_all_gather(shard, all);
    b = ep->start_all_to_all(mine, one, theirs, one);
  } else {
    b = ep->start_all_to_all(mine, one, theirs, one);
    a = dp->start_all_gather(shard, all);
  }
  b->wait();
  a->wait();
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(element(all, 2 * r), 4 * r);
    EXPECT_EQ(element(all, 2 * r + 1), 4 * r + 1);
    EXPECT_EQ(element(theirs, r), 10 * r + me);
  }
}

}  // namespace
}  // namespace quill::test
