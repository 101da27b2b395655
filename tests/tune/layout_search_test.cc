// The layout search of `quill tune` (tune/layout_search.h): Megatron's pipeline splits, the divisibility
// and memory refusals counted by reason, and every fitting candidate re-checked against quill plan.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <numeric>

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
    // With this much memory the smallest fraction that fits is no offload.
    EXPECT_FALSE(c.optimizer.cpu_offload);
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

// Inkling-Small on the seed's 32 H200: the seed's layout is among the candidates, with the smallest fitting
// offload the plan gives; each candidate's figures are the plan's for its flags.
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
           c.layout.pp_layers == std::vector<int64_t>{12, 10, 10, 10} && c.optimizer.exp_avg == DType::F32;
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
}

}  // namespace
}  // namespace quill::tune
