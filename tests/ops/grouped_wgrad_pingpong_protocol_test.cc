// The barrier protocol of the weight gradient's ping-pong form (src/ops/cuda/grouped_wgrad_pingpong.cu) without a
// GPU: a model of its producer and two consumer warpgroups, run under random interleavings, checks that every wait on a
// stage's full barrier passes only once that very load has landed (a phase parity tells apart only the current round
// from the one before), that each stage is released once per round in round order, and that everything finishes.
// The first form let a warpgroup skip the other's stages and wait a ring ahead; it deadlocked on an H100 (2026-12-07,
// bench/results/2026-12-07-h100-wgrad-pingpong-attention-ncu/). With the products taking turns (the named barriers
// 3 and 4) the model passes; without them it finds the same fault, so the test can fail.
#include "ops/cuda/grouped_wgrad_schedule.h"
#include "ops/grouped_wgrad_host_grid.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace quill::cuda::grouped_wgrad {
namespace {

using test::HostGrid;

// One CTA's walk: the stage count of each of its tiles (tile j belongs to warpgroup j % 2).
std::vector<int> cta_stage_counts(const std::vector<int>& counts, int tiles_m, int tiles_n, int grid, int cta) {
  std::vector<int> offset(counts.size() + 1, 0);
  for (size_t e = 0; e < counts.size(); ++e) offset[e + 1] = offset[e] + counts[e];
  const HostGrid g{offset.data(), false, offset.data(), tiles_m, tiles_n};
  const int total = static_cast<int>(counts.size()) * tiles_m * tiles_n;
  std::vector<int> stages;
  constexpr int kN = static_cast<int>(kPingpongTileN);
  for (int t = cta; t < total; t += grid) stages.push_back(stage_count(tile_at<kN>(g, t)));
  return stages;
}

// The kernel's barriers and actors as state machines; returns "" or what went wrong.
std::string run_protocol(const std::vector<int>& tile_stages, int ring, bool turns, uint64_t seed) {
  std::vector<int> full_done(ring, 0), empty_done(ring, 0), next_release_round(ring, 0);
  int loads = 0;
  for (int n : tile_stages) loads += n;
  const int tiles = static_cast<int>(tile_stages.size());
  int turn_signals[2] = {0, 0};  // products finished per warpgroup (named barrier 3 / 4 arrivals)
  // Producer: the next load to issue.
  int produced = 0;
  // Consumers: the CTA's tile index j (the warpgroup's own), the stage kt within it, the ring index it of its load.
  struct Wg {
    int j, kt, it;
    bool done;
  } wg[2] = {{0, 0, 0, false}, {0, 0, 0, false}};
  auto parity_passes = [](int completed, int parity) { return (completed & 1) != parity; };
  auto release = [&](int it, std::string& fault) {
    const int s = it % ring, round = it / ring;
    if (round != next_release_round[s] && fault.empty())
      fault = "stage " + std::to_string(it) + " released out of its slot's order";
    ++next_release_round[s];
    ++empty_done[s];  // one warpgroup's four warps: the phase completes
  };
  // Advances warpgroup w over the other's tiles (their stages skipped) to its own next tile.
  auto skip_to_own = [&](Wg& c, int w) {
    while (c.j < tiles && (c.j & 1) != w) c.it += tile_stages[c.j++];
    if (c.j >= tiles) c.done = true;
  };
  skip_to_own(wg[0], 0);
  skip_to_own(wg[1], 1);
  std::mt19937_64 rng(seed);
  std::string fault;
  while (fault.empty()) {
    std::vector<int> ready;  // 0: the producer, 1 + w: warpgroup w
    if (produced < loads) {
      const int s = produced % ring;
      if (parity_passes(empty_done[s], ((produced / ring) & 1) ^ 1)) ready.push_back(0);
    }
    for (int w = 0; w < 2; ++w) {
      Wg& c = wg[w];
      if (c.done) continue;
      // Tile j - 1 is the other warpgroup's ((j - 1) / 2)-th: its product must be done (the kernel's order_wait).
      if (c.kt == 0 && turns && c.j > 0 && turn_signals[1 - w] < (c.j + 1) / 2) continue;
      if (tile_stages[c.j] == 0) {
        ready.push_back(1 + w);
        continue;
      }
      if (parity_passes(full_done[c.it % ring], (c.it / ring) & 1)) ready.push_back(1 + w);
    }
    if (ready.empty()) {
      if (produced == loads && wg[0].done && wg[1].done) return "";
      return "deadlock: producer at load " + std::to_string(produced) + " of " + std::to_string(loads);
    }
    const int actor = ready[rng() % ready.size()];
    if (actor == 0) {
      const int s = produced % ring;
      if (empty_done[s] != produced / ring) fault = "load " + std::to_string(produced) + " into a stage not yet free";
      ++full_done[s];  // issued and landed
      ++produced;
      continue;
    }
    const int w = actor - 1;
    Wg& c = wg[w];
    if (tile_stages[c.j] > 0) {
      const int s = c.it % ring;
      if (full_done[s] != c.it / ring + 1)
        fault = "warpgroup " + std::to_string(w) + " passed the wait for load " + std::to_string(c.it) +
                " with its slot's round " + std::to_string(full_done[s] - 1) + " landed";
      if (c.kt > 0) release(c.it - 1, fault);  // one stage late (wgmma.wait_group 1)
      ++c.it;
      if (++c.kt < tile_stages[c.j]) continue;
      release(c.it - 1, fault);  // the tile's last stage, after wgmma.wait_group 0
    }
    ++turn_signals[w];  // the product of tile j done: the other's turn
    c.kt = 0;
    ++c.j;
    skip_to_own(c, w);
  }
  return fault;
}

TEST(GroupedWgradPingpongProtocol, TheTurnsKeepEveryWaitOnItsOwnRound) {
  // The shapes of GroupedWgradWgmma.ThePingpongFormGivesTheHalfStagingsBits (128-column tiles), every CTA of 132, and a
  // seed rank's 32 experts x 768 rows; five stages as the kernel has.
  struct Shape {
    std::vector<int> counts;
    int M, N;
  };
  const std::vector<Shape> shapes = {{{0, 100, 64, 1, 0, 200, 63, 65, 0}, 256, 512},
                                     {{700, 0, 333, 1, 64}, 512, 1024},
                                     {{384, 401, 350, 0, 512, 384, 129, 383}, 512, 1024},
                                     {std::vector<int>(32, 768), 4096, 4096}};
  for (const Shape& sh : shapes) {
    for (int cta : {0, 1, 27, 28, 131}) {
      const std::vector<int> stages = cta_stage_counts(sh.counts, sh.M / 128, sh.N / 128, 132, cta);
      for (uint64_t seed = 1; seed <= 20; ++seed)
        ASSERT_EQ(run_protocol(stages, 5, /*turns=*/true, seed), "") << "CTA " << cta << ", seed " << seed;
    }
  }
}

TEST(GroupedWgradPingpongProtocol, WithoutTheTurnsTheModelFindsTheFirstFormsFault) {
  // The first form's shape that deadlocked on the H100: CTA 0 walks expert 0's 11 stages, then expert 4's one.
  const std::vector<int> stages = cta_stage_counts({700, 0, 333, 1, 64}, 4, 8, 132, 0);
  ASSERT_EQ(stages, (std::vector<int>{11, 1}));
  int faults = 0;
  std::string first;
  for (uint64_t seed = 1; seed <= 50; ++seed) {
    const std::string fault = run_protocol(stages, 5, /*turns=*/false, seed);
    if (!fault.empty() && first.empty()) first = fault;
    faults += fault.empty() ? 0 : 1;
  }
  EXPECT_GT(faults, 0);
  // Warpgroup 1 waits for load 11 (slot 1, round 2) and passes on round 0's phase.
  EXPECT_NE(first.find("warpgroup 1 passed the wait for load 11"), std::string::npos) << first;
  for (uint64_t seed = 1; seed <= 50; ++seed) EXPECT_EQ(run_protocol(stages, 5, /*turns=*/true, seed), "");
}

}  // namespace
}  // namespace quill::cuda::grouped_wgrad
