// The MoE block under expert parallelism (ep = every rank of mpirun, each rank holding E/ep of the
// routed experts), against the one-rank block on the same weights: each rank routes its own tokens,
// and its output and input gradient must equal the one-rank block's for those tokens; the gradient
// of each local expert must equal the one-rank gradient summed over every rank's tokens; the
// reported per-expert counts are the rank's own (all E experts, so their sum over ranks is the
// global count). The choice of experts is fixed (routing replay), which also makes the edge cases
// reachable: random routing; every token of every rank to two experts of rank 0 (the other ranks
// receive no row at all, six experts get none anywhere); and each rank sending all its tokens to
// the same two experts of the next rank (so it sends nothing to every other peer); and, with one
// expert per token, every token of a rank to one expert (a different one per rank, so each rank's
// whole share lands on one expert of one peer, and most experts get nothing).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "comm/mpi_test_env.h"
#include "model/moe_block.h"
#include "model/param_placement.h"
#include "parallel/expert_dispatch.h"

namespace quill::test {
namespace {

InklingConfig tiny() { return load_inkling_config(std::string(QUILL_SOURCE_DIR) + "/configs/tiny.json"); }

constexpr int64_t kLayer = 1;  // tiny's first MoE layer
constexpr uint64_t kSeed = 77;

using Routing = std::function<void(int rank, int64_t t, int32_t* slots)>;

Tensor values(int64_t rows, int64_t cols, uint64_t seed) {
  Tensor x = Tensor::empty({rows, cols}, DType::F32);
  uint64_t s = seed * 2654435761ull + 12345;
  for (int64_t i = 0; i < x.numel(); ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x.data_as<float>()[i] = static_cast<float>(static_cast<double>(s >> 40) / static_cast<double>(1ull << 24) - 0.5);
  }
  return x;
}

struct RankRow {
  Tensor x, dy, topk;
};

// Rank r's tokens (a different count per rank), the output gradient and the fixed routing.
RankRow row_of(int rank, const InklingConfig& c, const Routing& routing) {
  const int64_t T = 6 + 2 * rank, k = c.num_experts_per_tok;
  RankRow r;
  r.x = values(T, c.hidden_size, 10 + static_cast<uint64_t>(rank));
  r.dy = values(T, c.hidden_size, 50 + static_cast<uint64_t>(rank));
  r.topk = Tensor::empty({T, k}, DType::I32);
  for (int64_t t = 0; t < T; ++t) routing(rank, t, r.topk.data_as<int32_t>() + t * k);
  return r;
}

struct Result {
  Tensor y, dx, counts;
};

Result run_block(const MoeBlock& block, const RankRow& row) {
  const DeviceContext ctx = DeviceContext::cpu();
  MoeBlock::Saved saved;
  Result r;
  r.y = block.forward(ctx, row.x, saved, row.topk).clone();
  r.dx = block.backward(ctx, saved, row.dy).clone();
  r.counts = saved.counts_E.clone();
  return r;
}

double rel_diff(const float* a, const float* b, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; ++i) num += (a[i] - b[i]) * (a[i] - b[i]), den += static_cast<double>(b[i]) * b[i];
  return std::sqrt(num / std::max(den, 1e-30));
}

void expect_equal_to_one_rank(const Routing& routing, const std::string& what, int64_t top_k = 0) {
  SCOPED_TRACE(what);
  MpiComm& world = mpi_world();
  const int ranks = world.size(), rank = world.rank();
  InklingConfig c = tiny();
  if (top_k > 0) c.num_experts_per_tok = top_k;
  const DeviceContext ctx = DeviceContext::cpu();
  LayoutSpec spec;
  spec.dp = ranks, spec.ep = ranks;
  const Layout layout = Layout::create(spec, c.num_layers, &world);

  ParamTable sharded = ParamTable::for_config(c, layout);
  sharded.init_random(kSeed);
  place_params(sharded, ctx, layout);
  zero_grads(sharded, ctx, GradReset::kZero);
  const MoeBlock ep_block(c, kLayer, sharded, TensorParallel{}, ExpertParallel::of(layout));
  const Result got = run_block(ep_block, row_of(rank, c, routing));

  ParamTable whole = ParamTable::for_config(c);
  whole.init_random(kSeed);
  place_params(whole, ctx);
  zero_grads(whole, ctx, GradReset::kZero);
  const MoeBlock one_block(c, kLayer, whole);
  Result mine;
  for (int r = 0; r < ranks; ++r) {  // every rank's tokens through the one-rank block: its experts' gradient sums them
    Result res = run_block(one_block, row_of(r, c, routing));
    if (r == rank) mine = res;
  }

  ASSERT_EQ(got.y.shape(), mine.y.shape());
  EXPECT_LE(rel_diff(got.y.data_as<float>(), mine.y.data_as<float>(), got.y.numel()), 1e-6) << "output";
  EXPECT_LE(rel_diff(got.dx.data_as<float>(), mine.dx.data_as<float>(), got.dx.numel()), 1e-6) << "input gradient";
  ASSERT_EQ(got.counts.numel(), c.n_routed_experts);
  for (int64_t e = 0; e < c.n_routed_experts; ++e)
    EXPECT_EQ(got.counts.data_as<int64_t>()[e], mine.counts.data_as<int64_t>()[e]) << "expert " << e;

  const std::string p = "model.llm.layers." + std::to_string(kLayer) + ".mlp.experts.";
  for (const char* name : {"w13_weight", "w2_weight"}) {
    const Param& local = sharded.at(p + name);
    const Param& ref = whole.at(p + name);
    const int64_t El = local.shape[0], per = local.grad.numel() / El;
    ASSERT_EQ(El * ranks, ref.shape[0]) << name;
    ASSERT_EQ(local.shard.expert_begin, rank * El) << name;
    const float* want = ref.grad.data_as<float>() + local.shard.expert_begin * per;
    double scale = 0;
    for (int64_t i = 0; i < El * per; ++i) scale = std::max(scale, std::fabs(static_cast<double>(want[i])));
    for (int64_t i = 0; i < El * per; ++i)
      ASSERT_NEAR(local.grad.data_as<float>()[i], want[i], 1e-6 * std::max(scale, 1e-30))
          << name << " element " << i << " (local expert " << i / per << ")";
  }
}

TEST(MoeExpertParallel, RandomRoutingEqualsOneRank) {
  expect_equal_to_one_rank(
      [](int rank, int64_t t, int32_t* slots) {
        const int32_t a = static_cast<int32_t>((t * 5 + rank * 3) % 8);
        slots[0] = a;
        slots[1] = (a + 1 + static_cast<int32_t>((t + rank) % 7)) % 8;
      },
      "random routing");
}

TEST(MoeExpertParallel, EveryTokenToRankZerosExpertsEqualsOneRank) {
  // Ranks other than 0 receive no row (their local experts get no gradient: zero); experts 2..7 none.
  expect_equal_to_one_rank(
      [](int, int64_t t, int32_t* slots) {
        slots[0] = t % 2 == 0 ? 0 : 1;
        slots[1] = t % 2 == 0 ? 1 : 0;
      },
      "every token to experts 0 and 1");
}

TEST(MoeExpertParallel, EachRankToTheNextRanksExpertsEqualsOneRank) {
  expect_equal_to_one_rank(
      [](int rank, int64_t, int32_t* slots) {
        const int ranks = mpi_world().size(), per = 8 / ranks;
        const int32_t first = static_cast<int32_t>(((rank + 1) % ranks) * per);
        slots[0] = first;
        slots[1] = first + 1;  // per >= 2 on 2 and 4 ranks: both on the next rank
      },
      "all of a rank's tokens to the next rank's experts");
}

TEST(MoeExpertParallel, AllOfARanksTokensToOneExpertEqualsOneRank) {
  // Top-1 routing: rank r sends every token to expert 3 r + 1 (mod 8): rank 0 to expert 1 (its own),
  // rank 1 to expert 4, rank 2 to 7, rank 3 to 2; the other experts receive nothing anywhere.
  expect_equal_to_one_rank([](int rank, int64_t, int32_t* slots) { slots[0] = (3 * rank + 1) % 8; },
                           "every token of a rank to one expert (top-1)", /*top_k=*/1);
}

}  // namespace
}  // namespace quill::test
