// The schedule of the Hopper attention backward (src/ops/cuda/attention_wg_bwd_layout.h), checked by brute
// force on the CPU: every allowed (query, key) pair is visited by exactly one (CTA, step); the CTAs that
// visit a query tile are a contiguous run of key tiles, so the fixed order of their dQ additions
// (additions_before) counts 0, 1, 2, ... with no gap and no repeat; the mask and bias shortcuts are exact;
// the shared-memory plan fits and aligns.
#include "ops/cuda/attention_wg_bwd_layout.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace quill::cuda::attn_wg::bwd {
namespace {

bool allowed(int t, int s, int T, int window) { return t < T && s >= 0 && s <= t && (window == 0 || t - s < window); }

// CTA kt visits query tiles t0 = first_query(s0) + 64 i, i < query_tile_count.
bool visits(int kt, int t0, int T, int window) {
  const int s0 = kt * kKeys, n = query_tile_count(s0, T, window);
  return t0 >= first_query(s0) && (t0 - first_query(s0)) % kQueries == 0 && (t0 - first_query(s0)) / kQueries < n;
}

TEST(AttentionWgBwdLayout, EveryAllowedPairIsVisitedOnce) {
  for (int T : {1, 37, 64, 127, 128, 129, 300, 700})
    for (int window : {0, 1, 2, 63, 64, 70, 128, 200, 512}) {
      const int w = window >= T ? 0 : window;  // make_problem's normalisation
      const int n_kt = (T + kKeys - 1) / kKeys;
      for (int t = 0; t < T; ++t)
        for (int s = 0; s <= t; ++s) {
          if (!allowed(t, s, T, w)) continue;
          int times = 0;
          for (int kt = 0; kt < n_kt; ++kt)
            if (s >= kt * kKeys && s < (kt + 1) * kKeys && visits(kt, t / kQueries * kQueries, T, w)) ++times;
          ASSERT_EQ(times, 1) << "T=" << T << " window=" << w << " t=" << t << " s=" << s;
        }
      // No CTA walks past T: its last query tile starts below T.
      for (int kt = 0; kt < n_kt; ++kt) {
        const int s0 = kt * kKeys, n = query_tile_count(s0, T, w);
        ASSERT_GE(n, 1);
        EXPECT_LT(first_query(s0) + (n - 1) * kQueries, T);
      }
    }
}

TEST(AttentionWgBwdLayout, OrderedAdditionsCountWithoutGaps) {
  for (int T : {64, 129, 300, 700, 2048})
    for (int window : {0, 1, 70, 128, 200, 512}) {
      const int w = window >= T ? 0 : window;
      const int n_kt = (T + kKeys - 1) / kKeys;
      for (int t0 = 0; t0 < T; t0 += kQueries) {
        std::vector<int> before;
        for (int kt = 0; kt < n_kt; ++kt)
          if (visits(kt, t0, T, w)) before.push_back(additions_before(kt, t0, w));
        ASSERT_FALSE(before.empty()) << "T=" << T << " window=" << w << " t0=" << t0;
        for (size_t i = 0; i < before.size(); ++i)
          ASSERT_EQ(before[i], static_cast<int>(i)) << "T=" << T << " window=" << w << " t0=" << t0;
      }
    }
}

TEST(AttentionWgBwdLayout, ShortcutsAreExact) {
  for (int T : {37, 64, 129, 300})
    for (int window : {0, 5, 64, 70})
      for (int E : {1, 7, 64, 96, 130})
        for (int s0 = 0; s0 < T; s0 += kKeys)
          for (int t0 = s0; t0 < T; t0 += kQueries)
            for (int w = 0; w < kConsumerWgs; ++w) {
              const int sw = s0 + kWgKeys * w;
              bool all = true, any_close = false;
              for (int t = t0; t < t0 + kQueries; ++t)
                for (int s = sw; s < sw + kWgKeys; ++s) {
                  all = all && allowed(t, s, T, window);
                  any_close = any_close || (t - s >= 0 && t - s < E);
                }
              ASSERT_EQ(pair_fully_allowed(t0, sw, T, window), all) << T << " " << window << " " << t0 << " " << sw;
              // No bias staged only when every pair's distance is outside [0, E) (a bias of exactly zero).
              if (!step_has_bias(t0, sw, E)) {
                ASSERT_FALSE(any_close) << T << " " << E << " " << t0 << " " << sw;
              }
            }
}

TEST(AttentionWgBwdLayout, SharedMemoryPlanFitsAndAligns) {
  EXPECT_LE(kSmemBytes, kSmemLimit);
  for (int offset : {kSmemK, kSmemV, kSmemQ, kSmemDo, kSmemBias, kSmemDs, kSmemDqStage}) EXPECT_EQ(offset % 1024, 0);
  EXPECT_GE(kSmemDs - kSmemBias, kConsumerWgs * kQueries * kRbLd * 4);  // both warpgroups' staged bias
  EXPECT_EQ(kSmemBarriers % 8, 0);
  EXPECT_EQ(kDqStageBytes, kQueries * (kD / 2) * 4);
  EXPECT_EQ(kThreads % 128, 0);  // warpgroups only
}

}  // namespace
}  // namespace quill::cuda::attn_wg::bwd
