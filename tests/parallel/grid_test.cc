// Grid rank arithmetic against an independent brute force of Megatron-Core's RankGenerator
// definition (ranks count over the order's axes, first fastest; a group of some axes is every
// rank agreeing on all the other axes), against groups pinned by hand and from Megatron's own
// docstrings, and its validation errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "base/error.h"
#include "parallel/grid.h"

namespace quill {
namespace {

using Groups = std::vector<std::vector<int>>;

// --- brute force --------------------------------------------------------------------------

struct AxisLayout {
  std::vector<std::string> axes;  // fastest first
  std::map<std::string, int> size;
};

std::vector<std::string> tokens_of(const std::string& order) {
  std::vector<std::string> t;
  std::string cur;
  for (char c : order + "-") {
    if (c == '-') {
      t.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  for (std::string a : {"tp", "cp", "ep", "dp", "pp"})
    if (std::find(t.begin(), t.end(), a) == t.end()) t.push_back(a);
  return t;
}

// Megatron's two generators: dense = order with ep (size 1 there) dropped; expert = order with
// cp (size 1 there) dropped, tp -> etp, dp -> edp.
AxisLayout dense_layout(const LayoutSpec& s) {
  AxisLayout l;
  for (const std::string& t : tokens_of(s.order))
    if (t != "ep") l.axes.push_back(t);
  l.size = {{"tp", s.tp}, {"cp", s.cp}, {"dp", s.dp}, {"pp", s.pp}};
  return l;
}

AxisLayout expert_layout(const LayoutSpec& s, int world) {
  AxisLayout l;
  for (const std::string& t : tokens_of(s.order)) {
    if (t == "cp") continue;
    l.axes.push_back(t == "tp" ? "etp" : t == "dp" ? "edp" : t);
  }
  l.size = {{"etp", s.etp}, {"ep", s.ep}, {"edp", world / (s.etp * s.ep * s.pp)}, {"pp", s.pp}};
  return l;
}

// Coordinates of every rank, by counting (an odometer), not by division.
std::vector<std::map<std::string, int>> coordinates(const AxisLayout& l, int world) {
  std::vector<std::map<std::string, int>> coords;
  std::map<std::string, int> c;
  for (const std::string& a : l.axes) c[a] = 0;
  for (int r = 0; r < world; ++r) {
    coords.push_back(c);
    for (const std::string& a : l.axes) {
      if (++c[a] < l.size.at(a)) break;
      c[a] = 0;
    }
  }
  return coords;
}

std::vector<int> brute_group(const AxisLayout& l, int world, const std::set<std::string>& span, int rank) {
  auto coords = coordinates(l, world);
  std::vector<int> g;
  for (int r = 0; r < world; ++r) {
    bool same = true;
    for (const std::string& a : l.axes)
      if (!span.count(a) && coords[r].at(a) != coords[rank].at(a)) same = false;
    if (same) g.push_back(r);
  }
  return g;
}

struct KindSpec {
  GroupKind kind;
  bool expert;
  std::set<std::string> span;
};

const std::vector<KindSpec> kKinds = {
    {GroupKind::TP, false, {"tp"}},
    {GroupKind::CP, false, {"cp"}},
    {GroupKind::DP, false, {"dp"}},
    {GroupKind::PP, false, {"pp"}},
    {GroupKind::TP_CP, false, {"tp", "cp"}},
    {GroupKind::DP_CP, false, {"dp", "cp"}},
    {GroupKind::TP_DP, false, {"tp", "dp"}},
    {GroupKind::TP_DP_CP, false, {"tp", "dp", "cp"}},
    {GroupKind::MP, false, {"tp", "pp"}},
    {GroupKind::EP, true, {"ep"}},
    {GroupKind::ETP, true, {"etp"}},
    {GroupKind::EDP, true, {"edp"}},
    {GroupKind::ETP_EP, true, {"etp", "ep"}},
    {GroupKind::ETP_EP_PP, true, {"etp", "ep", "pp"}},
};

// Every rank, every kind: same ranks, index = position, groups() = the distinct groups in
// ascending first rank, partitioning the world.
void expect_matches_brute_force(int world, const LayoutSpec& s) {
  SCOPED_TRACE(fmt::format("world {} tp {} cp {} dp {} pp {} ep {} etp {} order {}", world, s.tp, s.cp, s.dp, s.pp, s.ep,
                           s.etp, s.order));
  Grid grid(world, s);
  ASSERT_EQ(all_group_kinds().size(), kKinds.size());
  for (const KindSpec& k : kKinds) {
    SCOPED_TRACE(group_kind_name(k.kind));
    const AxisLayout l = k.expert ? expert_layout(s, world) : dense_layout(s);
    Groups distinct;
    for (int r = 0; r < world; ++r) {
      const std::vector<int> want = brute_group(l, world, k.span, r);
      const RankGroup got = grid.group(k.kind, r);
      ASSERT_EQ(got.ranks, want) << "rank " << r;
      ASSERT_EQ(got.ranks[got.index], r);
      if (std::find(distinct.begin(), distinct.end(), want) == distinct.end()) distinct.push_back(want);
    }
    std::sort(distinct.begin(), distinct.end());
    EXPECT_EQ(grid.groups(k.kind), distinct);
    int covered = 0;
    for (const auto& g : distinct) covered += static_cast<int>(g.size());
    EXPECT_EQ(covered, world);
  }
  for (int r = 0; r < world; ++r) {
    const GridCoords c = grid.coords(r);
    EXPECT_EQ(c.tp, grid.group(GroupKind::TP, r).index);
    EXPECT_EQ(c.edp, grid.group(GroupKind::EDP, r).index);
  }
}

LayoutSpec sizes(int tp, int cp, int dp, int pp, int ep = 1, int etp = 1, std::string order = "tp-cp-ep-dp-pp") {
  LayoutSpec s;
  s.tp = tp;
  s.cp = cp;
  s.dp = dp;
  s.pp = pp;
  s.ep = ep;
  s.etp = etp;
  s.order = order;
  return s;
}

// --- the seed's layout: TP4 PP4 EP8 ETP1 DP2 CP1 on 32 ranks ---------------------------------

TEST(Grid, SeedLayoutMatchesBruteForce) { expect_matches_brute_force(32, sizes(4, 1, 2, 4, 8, 1)); }

TEST(Grid, SeedLayoutPinnedGroups) {
  Grid g(32, sizes(4, 1, 2, 4, 8, 1));
  EXPECT_EQ(g.edp(), 1);
  EXPECT_EQ(g.dense_order(), "tp-cp-dp-pp");
  EXPECT_EQ(g.expert_order(), "etp-ep-edp-pp");
  EXPECT_EQ(g.groups(GroupKind::TP), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}, {12, 13, 14, 15},
                                             {16, 17, 18, 19}, {20, 21, 22, 23}, {24, 25, 26, 27}, {28, 29, 30, 31}}));
  EXPECT_EQ(g.groups(GroupKind::PP), (Groups{{0, 8, 16, 24}, {1, 9, 17, 25}, {2, 10, 18, 26}, {3, 11, 19, 27},
                                             {4, 12, 20, 28}, {5, 13, 21, 29}, {6, 14, 22, 30}, {7, 15, 23, 31}}));
  const Groups dp = g.groups(GroupKind::DP);
  ASSERT_EQ(dp.size(), 16u);
  EXPECT_EQ(dp[0], (std::vector<int>{0, 4}));
  EXPECT_EQ(dp[3], (std::vector<int>{3, 7}));
  EXPECT_EQ(dp[4], (std::vector<int>{8, 12}));
  EXPECT_EQ(dp[15], (std::vector<int>{27, 31}));
  EXPECT_EQ(g.groups(GroupKind::DP_CP), dp);  // cp = 1
  EXPECT_EQ(g.groups(GroupKind::EP), (Groups{{0, 1, 2, 3, 4, 5, 6, 7}, {8, 9, 10, 11, 12, 13, 14, 15},
                                             {16, 17, 18, 19, 20, 21, 22, 23}, {24, 25, 26, 27, 28, 29, 30, 31}}));
  EXPECT_EQ(g.groups(GroupKind::EDP).size(), 32u);  // edp = 1: singletons
  EXPECT_EQ(g.groups(GroupKind::ETP).size(), 32u);
  EXPECT_EQ(g.group(GroupKind::MP, 5).ranks,
            (std::vector<int>{4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31}));
  EXPECT_EQ(g.group(GroupKind::ETP_EP_PP, 9).ranks.size(), 32u);

  const RankGroup tp = g.group(GroupKind::TP, 13);
  EXPECT_EQ(tp.ranks, (std::vector<int>{12, 13, 14, 15}));
  EXPECT_EQ(tp.index, 1);
  const GridCoords c = g.coords(29);  // 29 = tp 1 + dp 1 * 4 + pp 3 * 8
  EXPECT_EQ(c.tp, 1);
  EXPECT_EQ(c.dp, 1);
  EXPECT_EQ(c.pp, 3);
  EXPECT_EQ(c.ep, 5);  // ep stride 1 within a stage of 8 ranks
  EXPECT_EQ(c.edp, 0);
  EXPECT_EQ(g.describe(), "world 32: tp 4 cp 1 dp 2 pp 4 | ep 8 etp 1 edp 1 | order tp-cp-ep-dp-pp");
}

// --- examples from Megatron-Core's docstrings ------------------------------------------------

TEST(Grid, MegatronDocstringExamples) {
  // initialize_model_parallel: 16 GPUs, tp 2, pp 4 (dp 2).
  Grid a(16, sizes(2, 1, 2, 4));
  EXPECT_EQ(a.groups(GroupKind::DP), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  EXPECT_EQ(a.groups(GroupKind::TP), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}));
  EXPECT_EQ(a.groups(GroupKind::PP), (Groups{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}}));
  // context_parallel_size: 8 GPUs, tp 4, cp 2.
  Grid b(8, sizes(4, 2, 1, 1));
  EXPECT_EQ(b.groups(GroupKind::CP), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  // generate_masked_orthogonal_rank_groups: [tp, dp, pp] = [2, 3, 4], the dp mask.
  Grid c(24, sizes(2, 1, 3, 4));
  const Groups dp = c.groups(GroupKind::DP);
  ASSERT_EQ(dp.size(), 8u);
  EXPECT_EQ(dp[0], (std::vector<int>{0, 2, 4}));
  EXPECT_EQ(dp[1], (std::vector<int>{1, 3, 5}));
  EXPECT_EQ(dp[7], (std::vector<int>{19, 21, 23}));
  // ... and with order tp-pp-dp, 8 GPUs of 2-2-2: dp groups [0,4], [1,5], [2,6], [3,7]. (etp = tp,
  // Megatron's default, keeps edp = dp as a pp-not-last order requires.)
  Grid d(8, sizes(2, 1, 2, 2, 1, 2, "tp-cp-ep-pp-dp"));
  EXPECT_EQ(d.groups(GroupKind::DP), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
}

// --- odd layouts ---------------------------------------------------------------------------

TEST(Grid, OddLayouts) {
  Grid six(6, sizes(3, 1, 2, 1));
  EXPECT_EQ(six.groups(GroupKind::TP), (Groups{{0, 1, 2}, {3, 4, 5}}));
  EXPECT_EQ(six.groups(GroupKind::DP), (Groups{{0, 3}, {1, 4}, {2, 5}}));
  EXPECT_EQ(six.edp(), 6);  // ep = etp = 1: every rank holds all experts; 6 replicas
  EXPECT_EQ(six.groups(GroupKind::EDP), (Groups{{0, 1, 2, 3, 4, 5}}));

  // tp 2 cp 2 dp 3 on 12 ranks; experts etp 2 ep 3 -> edp 2.
  Grid g(12, sizes(2, 2, 3, 1, 3, 2));
  EXPECT_EQ(g.edp(), 2);
  EXPECT_EQ(g.group(GroupKind::TP, 0).ranks, (std::vector<int>{0, 1}));
  EXPECT_EQ(g.group(GroupKind::CP, 0).ranks, (std::vector<int>{0, 2}));
  EXPECT_EQ(g.group(GroupKind::DP, 0).ranks, (std::vector<int>{0, 4, 8}));
  EXPECT_EQ(g.group(GroupKind::DP_CP, 0).ranks, (std::vector<int>{0, 2, 4, 6, 8, 10}));
  EXPECT_EQ(g.group(GroupKind::TP_CP, 5).ranks, (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(g.group(GroupKind::ETP, 0).ranks, (std::vector<int>{0, 1}));
  EXPECT_EQ(g.group(GroupKind::EP, 0).ranks, (std::vector<int>{0, 2, 4}));
  EXPECT_EQ(g.group(GroupKind::EDP, 0).ranks, (std::vector<int>{0, 6}));
  EXPECT_EQ(g.group(GroupKind::EDP, 7).index, 1);

  for (auto [world, s] : std::vector<std::pair<int, LayoutSpec>>{
           {1, sizes(1, 1, 1, 1)},
           {6, sizes(3, 1, 2, 1)},
           {12, sizes(2, 2, 3, 1, 3, 2)},
           {12, sizes(1, 3, 2, 2, 2, 1)},
           {24, sizes(2, 1, 3, 4, 3, 2)},
           {30, sizes(5, 1, 3, 2, 3, 1)},
           {16, sizes(2, 2, 2, 2, 4, 1)},
           {8, sizes(2, 1, 2, 2, 2, 1, "tp-cp-ep-pp-dp")},
           {8, sizes(2, 2, 2, 1, 2, 2, "dp-tp-cp-ep-pp")},
           {12, sizes(2, 1, 3, 2, 2, 1, "pp-dp-ep-cp-tp")},
       }) {
    expect_matches_brute_force(world, s);
  }
}

TEST(Grid, OrderMayLeaveOutAxesOfSizeOne) {
  Grid g(8, sizes(2, 1, 4, 1, 1, 1, "tp-dp"));
  EXPECT_EQ(g.dense_order(), "tp-dp-cp-pp");
  EXPECT_EQ(g.group(GroupKind::DP, 1).ranks, (std::vector<int>{1, 3, 5, 7}));
  expect_matches_brute_force(8, sizes(2, 1, 4, 1, 1, 1, "tp-dp"));
}

// --- validation ----------------------------------------------------------------------------

void expect_error(int world, const LayoutSpec& s, const std::string& needle) {
  try {
    Grid g(world, s);
    ADD_FAILURE() << "expected an error containing '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(Grid, Errors) {
  expect_error(30, sizes(4, 1, 2, 4), "world size 30 must equal tp*cp*dp*pp = 4*1*2*4 = 32");
  expect_error(12, sizes(2, 2, 3, 1, 8, 1), "etp*ep*pp = 1*8*1 = 8 must divide the world size 12");
  expect_error(12, sizes(2, 2, 3, 1, 8, 1), "etp*ep = 8 must divide tp*cp*dp = 12");
  expect_error(16, sizes(2, 1, 2, 4, 1, 3), "etp*ep*pp = 3*1*4 = 12 must divide the world size 16");
  expect_error(8, sizes(2, 1, 2, 2, 4, 1, "tp-cp-ep-pp-dp"), "edp = world/(etp*ep*pp) = 1 must equal dp = 2");
  expect_error(8, sizes(2, 1, 4, 1, 4, 1, "tp-dp"), "leaves out axis 'ep', but ep is 4");
  expect_error(8, sizes(2, 1, 4, 1, 1, 1, "tp-dp-xp"), "unknown axis 'xp'");
  expect_error(8, sizes(2, 1, 4, 1, 1, 1, "tp-dp-tp"), "names axis 'tp' twice");
  expect_error(8, sizes(2, 1, 4, 1, 1, 1, "tp--dp"), "empty axis name");
  expect_error(8, sizes(0, 1, 4, 1), "tp must be at least 1");
  expect_error(0, sizes(1, 1, 1, 1), "world size must be at least 1");
  // The expert axes a layout leaves out must be of size 1 too: edp here is 2.
  expect_error(4, sizes(2, 1, 2, 1, 1, 1, "tp-cp-ep-pp"), "leaves out axis 'dp', but dp is 2");
}

}  // namespace
}  // namespace quill
