// The layout search of `quill tune` (tune/layout_search.h): Megatron's pipeline splits, the divisibility
// and memory refusals counted by reason, and every fitting candidate re-checked against quill plan.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <vector>

#include "model/config.h"
#include "plan/memory_plan.h"
#include "tune/layout_search.h"

namespace quill::tune {
namespace {

std::string fixture(const char* name) { return std::string(QUILL_FIXTURES) + "/configs/" + name; }

TEST(MegatronSplits, EvenAndEveryFirstLastPairThatLeavesAnEvenMiddle) {
  // 42 layers over 4 stages: no even split; first + last even (so the middle 2 stages split evenly).
  const auto s = megatron_splits(42, 4);
  EXPECT_TRUE(std::find(s.begin(), s.end(), std::vector<int64_t>{12, 10, 10, 10}) != s.end()) << "the seed's split";
  for (const auto& split : s) {
    ASSERT_EQ(split.size(), 4u);
    EXPECT_EQ(std::accumulate(split.begin(), split.end(), int64_t{0}), 42);
    EXPECT_EQ(split[1], split[2]);
    EXPECT_GE(*std::min_element(split.begin(), split.end()), 1);
  }
  // first in 1..39, last with first + last even and at most 40: 20 * 19 / 2 ... counted directly.
  int64_t expect = 0;
  for (int f = 1; f <= 40; ++f)
    for (int l = 1; f + l <= 40; ++l) expect += (f + l) % 2 == 0;
  EXPECT_EQ(static_cast<int64_t>(s.size()), expect);
  // 8 layers over 4 stages: the even split listed once (as no flags), then the uneven pairs.
  const auto e = megatron_splits(8, 4);
  EXPECT_TRUE(e.front().empty());
  EXPECT_EQ(std::count(e.begin(), e.end(), std::vector<int64_t>{2, 2, 2, 2}), 0);
  EXPECT_EQ(megatron_splits(5, 1), (std::vector<std::vector<int64_t>>{{}}));
  EXPECT_TRUE(megatron_splits(3, 4).empty());
  // Within 2 layers of the middle stages: 12/10/10/10 is, 14/8/8/12 is not.
  const auto near = megatron_splits(42, 4, 2);
  EXPECT_TRUE(std::find(near.begin(), near.end(), std::vector<int64_t>{12, 10, 10, 10}) != near.end());
  EXPECT_TRUE(std::find(near.begin(), near.end(), std::vector<int64_t>{14, 8, 8, 12}) == near.end());
  for (const auto& split : near) {
    EXPECT_LE(std::abs(split.front() - split[1]), 2);
    EXPECT_LE(std::abs(split.back() - split[1]), 2);
  }
}

// The tiny TP4-able model on 8 GPUs, 4 per node, 4 rows of 64 tokens, devices of 1 TiB.
SearchRequest tiny_on_eight_gpus() {
  SearchRequest q;
  q.config = load_inkling_config(fixture("tiny-tp4.json"));
  q.gpus = 8;
  q.gpus_per_node = 4;
  q.row_tokens = 64;
  q.global_batch = 4;
  q.device_memory = int64_t{1} << 40;
  return q;
}

TEST(LayoutSearch, SmallModelOnEightGpusRefusesByReasonAndEveryCandidateFits) {
  SearchRequest q = tiny_on_eight_gpus();
  const SearchResult r = search_layouts(q);
  EXPECT_GT(r.geometries, 0);
  ASSERT_FALSE(r.fitting.empty());
  // dp = 8 does not divide 4 rows: refused under that reason, never a candidate.
  EXPECT_GT(r.refused.at("global batch not divisible by data parallelism").count, 0);
  for (const Candidate& c : r.fitting) {
    EXPECT_EQ(4 % c.layout.dp, 0);
    EXPECT_LE(c.layout.tp, 4);
    EXPECT_EQ(c.layout.world(), 8);
    // With this much memory the smallest fraction that fits is no offload, and nothing is recomputed.
    EXPECT_FALSE(c.optimizer.cpu_offload);
    EXPECT_FALSE(c.recompute.active());
  }
  // A device too small for anything: every geometry refused for memory, counted, none fitting.
  q.device_memory = 1;
  const SearchResult none = search_layouts(q);
  EXPECT_TRUE(none.fitting.empty());
  int64_t refused = 0;
  for (const auto& [reason, x] : none.refused) refused += x.count;
  EXPECT_EQ(refused, none.geometries);
  EXPECT_GT(none.refused.at("out of device memory even with offload 1.0 and bf16 moments").count, 0);
}

// A node's host memory (quill train's startup check): too little refuses every candidate under the host
// reason; enough changes nothing.
TEST(LayoutSearch, HostMemoryRefusesCandidatesWhoseNodesCannotStart) {
  SearchRequest q = tiny_on_eight_gpus();
  const SearchResult unchecked = search_layouts(q);
  q.host_memory = int64_t{1} << 40;
  const SearchResult plenty = search_layouts(q);
  EXPECT_EQ(plenty.fitting.size(), unchecked.fitting.size());
  q.host_memory = 1024;  // no model's weights fit 1 KiB
  const SearchResult none = search_layouts(q);
  EXPECT_TRUE(none.fitting.empty());
  const auto host = none.refused.find("out of host memory at startup with fp32 moments at the smallest offload that fits the device");
  ASSERT_NE(host, none.refused.end());
  EXPECT_NE(host->second.example.find("node 0: the layout does not fit this node's host memory at startup"), std::string::npos)
      << host->second.example;
}

// The plan of a candidate's flags (its layout, optimizer memory and recompute) for the seed's workload.
plan::MemoryPlan plan_of(const SearchRequest& q, const Candidate& c, const RecomputeOptions& recompute) {
  plan::PlanRequest pr;
  pr.config = q.config;
  pr.layout = c.layout;
  pr.row_tokens = q.row_tokens;
  pr.global_batch = q.global_batch;
  pr.optimizer = c.optimizer;
  pr.recompute = recompute;
  return plan::plan_memory(pr);
}

bool same_geometry(const Candidate& a, const Candidate& b) {
  return a.layout.describe() == b.layout.describe() && a.layout.pp_layers == b.layout.pp_layers &&
         a.optimizer.exp_avg == b.optimizer.exp_avg;
}

// Recompute in place of offload: for a layout and moment dtype that needs offload otherwise (its offload candidate is
// beside it), selective (moe_act layernorm) with the smallest offload that fits beside it (0.1 less does not), and
// where that offload is not 0, block N without offload at the smallest N the plan fits (N - 1 does not). The seed's layout with bf16 moments fits with
// selective. Plans are re-checked for the seed and a few others (each plan takes a while).
void expect_recompute_replaces_offload(const SearchRequest& q, const SearchResult& r) {
  std::vector<const Candidate*> recomputed;
  RecomputeOptions selective;
  selective.granularity = RecomputeOptions::Granularity::Selective;
  selective.moe_act = selective.layernorm = true;
  for (const Candidate& c : r.fitting) {
    if (!c.recompute.active() && !c.recompute.selective()) continue;
    recomputed.push_back(&c);
    if (c.recompute.active()) {
      EXPECT_EQ(c.recompute.method, RecomputeOptions::Method::Block) << c.layout.describe();
      EXPECT_EQ(c.optimizer.effective_fraction(), 0) << c.layout.describe() << ": block recompute without offload";
    } else {
      EXPECT_TRUE(c.recompute.moe_act && c.recompute.layernorm) << c.layout.describe();
    }
    const auto offload = std::find_if(r.fitting.begin(), r.fitting.end(), [&](const Candidate& o) {
      return same_geometry(o, c) && !o.recompute.active() && !o.recompute.selective();
    });
    ASSERT_NE(offload, r.fitting.end()) << c.layout.describe();
    EXPECT_GT(offload->optimizer.effective_fraction(), c.optimizer.effective_fraction())
        << c.layout.describe() << ": recompute only where it saves offload";
  }
  ASSERT_FALSE(recomputed.empty());
  const auto seed = std::find_if(recomputed.begin(), recomputed.end(), [](const Candidate* c) {
    return c->layout.tp == 4 && c->layout.sequence_parallel && c->layout.pp == 4 && c->layout.ep == 8 &&
           c->layout.dp == 2 && c->layout.pp_layers == std::vector<int64_t>{12, 10, 10, 10} &&
           c->optimizer.exp_avg == DType::BF16;
  });
  ASSERT_NE(seed, recomputed.end()) << "the seed's layout with bf16 moments fits with recompute and no offload";
  EXPECT_TRUE((*seed)->recompute.selective()) << (*seed)->recompute.describe();
  // One block candidate at least (where selective does not fit), and a spread of the others.
  std::vector<const Candidate*> checked = {*seed};
  const auto block = std::find_if(recomputed.begin(), recomputed.end(), [](const Candidate* c) { return c->recompute.active(); });
  ASSERT_NE(block, recomputed.end()) << "layouts where selective does not fit get block recompute";
  checked.push_back(*block);
  for (size_t i = 0; i < recomputed.size() && checked.size() < 5; i += std::max<size_t>(1, recomputed.size() / 3))
    if (std::find(checked.begin(), checked.end(), recomputed[i]) == checked.end()) checked.push_back(recomputed[i]);
  for (const Candidate* c : checked) {
    SCOPED_TRACE(c->layout.describe() + " " + c->optimizer.describe() + " recompute " + c->recompute.describe());
    const plan::MemoryPlan fits = plan_of(q, *c, c->recompute);
    EXPECT_EQ(fits.largest().device_total(), c->peak_device_bytes());
    EXPECT_LE(c->peak_device_bytes(), q.device_memory);
    EXPECT_GT(plan_of(q, *c, RecomputeOptions{}).largest().device_total(), q.device_memory) << "needs recompute";
    if (!c->recompute.active()) {
      if (c->optimizer.effective_fraction() > 0) {  // the smallest offload that fits beside selective
        Candidate less = *c;
        less.optimizer.offload_fraction = std::max(0.0, c->optimizer.offload_fraction - 0.1);
        less.optimizer.cpu_offload = less.optimizer.offload_fraction > 1e-9;
        EXPECT_GT(plan_of(q, less, selective).largest().device_total(), q.device_memory) << "0.1 less offload";
      }
      continue;
    }
    EXPECT_GT(plan_of(q, *c, selective).largest().device_total(), q.device_memory) << "selective does not fit";
    if (c->recompute.num_layers > 1) {
      RecomputeOptions fewer = c->recompute;
      --fewer.num_layers;
      EXPECT_GT(plan_of(q, *c, fewer).largest().device_total(), q.device_memory) << "the smallest N that fits";
    }
  }
  std::printf("  %zu recompute candidates; the seed's layout with bf16 moments: %s without offload, %.2f GiB\n",
              recomputed.size(), (*seed)->recompute.describe().c_str(),
              static_cast<double>((*seed)->peak_device_bytes()) / (1 << 30));
  EXPECT_TRUE(std::any_of(r.pruning.begin(), r.pruning.end(), [](const std::string& p) {
    return p.find("--recompute-modules moe_act layernorm") != std::string::npos &&
           p.find("--recompute-method block") != std::string::npos;
  }));
}

// Inkling-Small on the seed's 32 H200: the seed's layout is among the candidates, with the smallest fitting
// offload the plan gives, and with recompute (selective, else block) in place of offload; each candidate's figures are the
// plan's for its flags.
TEST(LayoutSearch, InklingSmallOnThirtyTwoH200sHasTheSeedLayout) {
  SearchRequest q;
  q.config = load_inkling_config(fixture("inkling-small-hf.json"));
  q.gpus = 32;
  q.row_tokens = 8192;
  q.global_batch = 128;
  q.device_memory = plan::kH200MemoryBytes;
  const SearchResult r = search_layouts(q);
  const auto seed = std::find_if(r.fitting.begin(), r.fitting.end(), [](const Candidate& c) {
    return c.layout.tp == 4 && c.layout.sequence_parallel && c.layout.pp == 4 && c.layout.ep == 8 && c.layout.dp == 2 &&
           c.layout.pp_layers == std::vector<int64_t>{12, 10, 10, 10} && c.optimizer.exp_avg == DType::F32 &&
           !c.recompute.active();
  });
  ASSERT_NE(seed, r.fitting.end());
  EXPECT_LE(seed->optimizer.effective_fraction(), 0.7);
  plan::PlanRequest pr;
  pr.config = q.config;
  pr.layout = seed->layout;
  pr.row_tokens = 8192;
  pr.global_batch = 128;
  pr.optimizer = seed->optimizer;
  const plan::MemoryPlan mp = plan::plan_memory(pr);
  EXPECT_EQ(mp.largest().device_total(), seed->peak_device_bytes());
  EXPECT_LE(seed->peak_device_bytes(), q.device_memory);
  std::printf("Inkling-Small, 32 H200: %lld geometries, %lld plans, %zu fitting; seed layout fits at offload %.1f, %.2f GiB\n",
              static_cast<long long>(r.geometries), static_cast<long long>(r.plans), r.fitting.size(),
              seed->optimizer.effective_fraction(), static_cast<double>(seed->peak_device_bytes()) / (1 << 30));
  for (const auto& [reason, x] : r.refused)
    std::printf("  refused %lld: %s (e.g. %s)\n", static_cast<long long>(x.count), reason.c_str(), x.example.substr(0, 300).c_str());
  expect_recompute_replaces_offload(q, r);
}

}  // namespace
}  // namespace quill::tune
