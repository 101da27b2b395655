// Communicators for the groups of a Grid, under mpirun: every rank splits the world by its own
// group of one kind, and collectives inside the groups give the sums over exactly the ranks the
// grid assigns. The layout adapts to the world size (2 ranks: tp2; 4 ranks: tp2 dp2, ep2).
#include <gtest/gtest.h>

#include "mpi_test_env.h"
#include "parallel/grid.h"

namespace quill::test {
namespace {

LayoutSpec layout_for(int world) {
  LayoutSpec s;
  s.tp = world % 2 == 0 ? 2 : 1;
  s.dp = world / s.tp;
  s.ep = s.dp % 2 == 0 ? 2 : 1;  // expert layers: ep over the dp ranks, edp = world / ep
  return s;
}

// Each rank contributes (world rank + 1) * (i + 1); the group sum is sum(member + 1) * (i + 1).
void expect_group_sum(Comm& comm, const RankGroup& group, int world_rank) {
  ASSERT_EQ(comm.size(), group.size());
  EXPECT_EQ(comm.rank(), group.index);
  Tensor t = make_tensor(DType::F32, 13, [&](int64_t i) { return (world_rank + 1) * (i + 1); });
  comm.all_reduce(t, ReduceOp::Sum);
  double members = 0;
  for (int r : group.ranks) members += r + 1;
  for (int64_t i = 0; i < 13; ++i) EXPECT_EQ(element(t, i), members * (i + 1)) << "element " << i;
}

TEST(GridComm, AllReduceWithinEveryGroupKind) {
  MpiComm& world = mpi_world();
  const Grid grid(world.size(), layout_for(world.size()));
  for (GroupKind kind : all_group_kinds()) {
    SCOPED_TRACE(group_kind_name(kind));
    const RankGroup group = grid.group(kind, world.rank());
    std::unique_ptr<Comm> comm = world.split(group.ranks, group_kind_name(kind));
    EXPECT_EQ(comm->name(), group_kind_name(kind));
    expect_group_sum(*comm, group, world.rank());
  }
}

TEST(GridComm, TensorParallelAllGatherThenDataParallelReduceScatter) {
  // The pattern of a TP x DP step: gather a sharded activation inside tp, reduce-scatter a
  // gradient inside dp; check both against the grid's membership.
  MpiComm& world = mpi_world();
  const Grid grid(world.size(), layout_for(world.size()));
  const RankGroup tp = grid.group(GroupKind::TP, world.rank()), dp = grid.group(GroupKind::DP, world.rank());
  std::unique_ptr<Comm> tp_comm = world.split(tp.ranks, "tp"), dp_comm = world.split(dp.ranks, "dp");

  Tensor shard = make_tensor(DType::BF16, 3, [&](int64_t i) { return world.rank() * 4 + i; });
  Tensor full = Tensor::empty({3 * tp.size()}, DType::BF16);
  tp_comm->all_gather(shard, full);
  for (int j = 0; j < tp.size(); ++j)
    for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(element(full, j * 3 + i), tp.ranks[j] * 4 + i);

  Tensor grad = make_tensor(DType::F32, 5 * dp.size(), [&](int64_t i) { return 0.5 * (world.rank() + 1) + i; });
  Tensor owned = Tensor::empty({5}, DType::F32);
  dp_comm->reduce_scatter(grad, owned, ReduceOp::Sum);
  for (int64_t i = 0; i < 5; ++i) {
    double want = 0;
    for (int r : dp.ranks) want += 0.5 * (r + 1) + dp.index * 5 + i;
    EXPECT_EQ(element(owned, i), want);
  }
}

TEST(GridComm, ExpertParallelAllToAll) {
  MpiComm& world = mpi_world();
  const Grid grid(world.size(), layout_for(world.size()));
  const RankGroup ep = grid.group(GroupKind::EP, world.rank());
  std::unique_ptr<Comm> ep_comm = world.split(ep.ranks, "ep");
  const int n = ep.size(), me = ep.index;
  // Uneven: member s sends s + d + 1 tokens of 2 values to member d.
  std::vector<int64_t> sc(n), rc(n);
  for (int d = 0; d < n; ++d) {
    sc[d] = 2 * (me + d + 1);
    rc[d] = 2 * (d + me + 1);
  }
  Tensor in = Tensor::empty({2 * n * (n + me + 1)}, DType::F32);
  int64_t off = 0;
  for (int d = 0; d < n; ++d)
    for (int64_t k = 0; k < sc[d]; ++k) set_element(in, off++, ep.ranks[me] * 100 + d * 10 + k);
  Tensor out = Tensor::empty({2 * n * (n + me + 1)}, DType::F32);
  ep_comm->all_to_all(in, sc, out, rc);
  off = 0;
  for (int s = 0; s < n; ++s)
    for (int64_t k = 0; k < rc[s]; ++k) EXPECT_EQ(element(out, off++), ep.ranks[s] * 100 + me * 10 + k);
}

}  // namespace
}  // namespace quill::test
