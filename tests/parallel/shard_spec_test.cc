// Shard specs and their slice runs against brute force: for every rank of small layouts, the runs
// pick exactly the elements whose global coordinates fall in the rank's ranges (experts on
// dimension 0, the tensor-parallel rows of the split dimension, both halves with gate_up), in local
// row-major order; the ranks of a group tile the tensor; splits that do not divide are refused.
#include <gtest/gtest.h>

#include <set>

#include "base/error.h"
#include "parallel/shard_spec.h"

namespace quill {
namespace {

// Global flat indices of a rank's slice by index arithmetic, in local row-major order.
std::vector<int64_t> brute(const ShardSpec& s) {
  const Shape& g = s.global_shape;
  std::vector<int64_t> out;
  const int64_t n = shape_numel(g);
  for (int64_t i = 0; i < n; ++i) {
    int64_t rest = i;
    std::vector<int64_t> c(g.size());
    for (size_t d = g.size(); d-- > 0;) {
      c[d] = rest % g[d];
      rest /= g[d];
    }
    bool mine = true;
    if (s.rule.experts) mine &= c[0] >= s.expert_begin && c[0] < s.expert_end;
    if (s.rule.tp_dim >= 0) {
      const int64_t x = c[static_cast<size_t>(s.rule.tp_dim)], half = g[static_cast<size_t>(s.rule.tp_dim)] / 2;
      const int64_t y = s.rule.gate_up && x >= half ? x - half : x;
      mine &= y >= s.tp_begin && y < s.tp_end;
    }
    if (mine) out.push_back(i);
  }
  // Local row-major order: gate_up puts the gate rows of the range before the up rows, which is the
  // global order too, so ascending global order is local order.
  return out;
}

std::vector<int64_t> from_runs(const ShardSpec& s) {
  std::vector<int64_t> out;
  int64_t local = 0;
  for (const SliceRun& r : slice_runs(s)) {
    EXPECT_EQ(r.local_offset, local);
    for (int64_t i = 0; i < r.length; ++i) out.push_back(r.global_offset + i);
    local += r.length;
  }
  EXPECT_EQ(local, shape_numel(s.local_shape));
  return out;
}

TEST(ShardSpec, RunsMatchBruteForceAndRanksTileTheTensor) {
  struct Case {
    Shape shape;
    ShardRule rule;
  };
  const std::vector<Case> cases = {
      {{12, 5}, {0, 1, false, false, 0}},      // column-parallel
      {{5, 12}, {1, 1, false, false, 0}},      // row-parallel
      {{12, 5}, {0, 3, false, false, 0}},      // by heads of 3 rows
      {{8, 3}, {0, 1, true, false, 0}},        // dense gate/up
      {{4, 8, 3}, {1, 1, true, true, 0}},      // routed experts, gate/up split by etp
      {{4, 3, 8}, {2, 1, false, true, 0}},     // routed experts' down projection
      {{4, 6, 2}, {-1, 1, false, true, 0}},    // routed experts, whole
      {{6}, {-1, 1, false, false, 0}},         // replicated vector
      {{3, 8, 2}, {1, 1, true, false, 0}},     // shared experts' gate/up
  };
  for (const Case& c : cases) {
    for (const auto& [tp, ep] : {std::pair{1, 1}, {2, 1}, {2, 2}, {1, 4}, {2, 4}}) {
      LayoutSpec sizes;
      sizes.tp = tp;
      sizes.ep = ep;
      sizes.etp = c.rule.experts ? tp : 1;
      sizes.dp = 4;
      std::set<int64_t> covered;
      int64_t total = 0;
      for (int t = 0; t < tp; ++t) {
        for (int e = 0; e < ep; ++e) {
          GridCoords coords;
          coords.tp = t;
          coords.ep = e;
          coords.etp = c.rule.experts ? t : 0;
          ShardSpec s;
          try {
            s = make_shard_spec("t", c.shape, c.rule, sizes, coords);
          } catch (const Error&) {
            continue;  // does not divide: refusals are tested below
          }
          const std::vector<int64_t> got = from_runs(s), want = brute(s);
          EXPECT_EQ(got, want) << "tp " << tp << " ep " << ep << " rank " << t << "," << e;
          // The row view agrees: local element k is global element want[k].
          const RowMap m = row_map(s);
          const int64_t cols = c.shape.back(), local_cols = s.local_shape.back();
          for (size_t k = 0; k < want.size(); ++k) {
            const int64_t row = want[k] / cols, col = want[k] % cols;
            ASSERT_GE(m.local_row[static_cast<size_t>(row)], 0);
            ASSERT_TRUE(col >= m.col_begin && col < m.col_end);
            EXPECT_EQ(m.local_row[static_cast<size_t>(row)] * local_cols + (col - m.col_begin), static_cast<int64_t>(k));
          }
          covered.insert(got.begin(), got.end());
          total += static_cast<int64_t>(got.size());
          if (!c.rule.experts && c.rule.tp_dim < 0) EXPECT_TRUE(s.tp_replicated);
        }
      }
      if (total == 0) continue;
      const bool split_tp = c.rule.tp_dim >= 0 && tp > 1, split_ep = c.rule.experts && ep > 1;
      if (split_tp || split_ep || (c.rule.tp_dim < 0 && !c.rule.experts)) {
        // Replicated tensors are counted once per rank; split ones tile the tensor.
        const int64_t copies = (c.rule.tp_dim < 0 ? tp : 1) * (c.rule.experts ? 1 : ep);
        EXPECT_EQ(total, shape_numel(c.shape) * copies);
        EXPECT_EQ(static_cast<int64_t>(covered.size()), shape_numel(c.shape));
      }
    }
  }
}

TEST(ShardSpec, RefusesSplitsThatDoNotDivideNamingTheTensorAndFlag) {
  LayoutSpec sizes;
  sizes.tp = 4;
  sizes.ep = 3;
  GridCoords c;
  try {
    make_shard_spec("model.llm.layers.0.attn.wq_du.weight", {24, 8}, {0, 8, false, false, 0}, sizes, c);
    FAIL() << "3 heads over 4 ranks";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--tensor-model-parallel-size 4 does not divide model.llm.layers.0.attn.wq_du.weight"),
              std::string::npos)
        << e.what();
  }
  try {
    make_shard_spec("model.llm.layers.1.mlp.experts.w2_weight", {8, 4, 4}, {-1, 1, false, true, 0}, sizes, c);
    FAIL() << "8 experts over 3 ranks";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--expert-model-parallel-size 3 does not divide the 8 routed experts"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace quill
