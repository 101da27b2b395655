// model/recompute.h: Megatron's layer groups per stage (uniform: consecutive groups of N, the last
// shorter; block: the first N layers one by one), selective's modules, and the flag words.
#include "model/recompute.h"

#include <gtest/gtest.h>

#include "util/test_util.h"

namespace quill {
namespace {

using Groups = std::vector<std::pair<int64_t, int64_t>>;

TEST(Recompute, UniformGroupsCoverTheStageInGroupsOfN) {
  EXPECT_EQ(recompute_groups(parse_recompute("full", "uniform", 1), 3), (Groups{{0, 1}, {1, 2}, {2, 3}}));
  EXPECT_EQ(recompute_groups(parse_recompute("full", "uniform", 4), 10), (Groups{{0, 4}, {4, 8}, {8, 10}}));
  EXPECT_EQ(recompute_groups(parse_recompute("full", "", 20), 10), (Groups{{0, 10}}));  // uniform by default
}

TEST(Recompute, BlockRecomputesTheFirstNLayersOneByOne) {
  EXPECT_EQ(recompute_groups(parse_recompute("full", "block", 2), 10), (Groups{{0, 1}, {1, 2}}));
  EXPECT_EQ(recompute_groups(parse_recompute("full", "block", 12), 3), (Groups{{0, 1}, {1, 2}, {2, 3}}));
}

TEST(Recompute, NoneRecomputesNothing) {
  EXPECT_TRUE(recompute_groups(parse_recompute("", "", 1), 10).empty());
  EXPECT_TRUE(recompute_groups(parse_recompute("none", "", 1), 10).empty());
  EXPECT_EQ(parse_recompute("", "", 1).describe(), "none");
  EXPECT_EQ(parse_recompute("full", "block", 3).describe(), "full block 3");
}

// Selective keeps every layer (no groups) and names its modules.
TEST(Recompute, SelectiveKeepsEveryLayerAndNamesItsModules) {
  const RecomputeOptions both = parse_recompute("selective", "", 1, {"moe_act", "layernorm"});
  EXPECT_TRUE(both.selective() && both.moe_act && both.layernorm);
  EXPECT_FALSE(both.active());
  EXPECT_TRUE(recompute_groups(both, 10).empty());
  EXPECT_EQ(both.describe(), "selective moe_act layernorm");
  const RecomputeOptions act = parse_recompute("selective", "", 1, {"moe_act"});
  EXPECT_TRUE(act.moe_act && !act.layernorm);
  EXPECT_EQ(act.describe(), "selective moe_act");
  EXPECT_FALSE(parse_recompute("full", "block", 2).selective());
}

TEST(Recompute, BadWordsAreNamed) {
  test::expect_error([] { parse_recompute("selective", "", 1, {"moe_act", "moe"}); },
                     "--recompute-modules moe: not built in quill");
  test::expect_error([] { parse_recompute("selective", "", 1, {"core_attn"}); },
                     "--recompute-modules core_attn: quill's attention keeps no [T, T] tensor");
  test::expect_error([] { parse_recompute("full", "uniform", 1, {"moe_act"}); },
                     "--recompute-modules moe_act needs --recompute-granularity selective");
  test::expect_error([] { parse_recompute("selective", "uniform", 1, {"moe_act"}); },
                     "--recompute-method uniform needs --recompute-granularity full");
  test::expect_error([] { parse_recompute("selective", "", 3, {"moe_act"}); },
                     "--recompute-num-layers 3 needs --recompute-granularity full (selective keeps every layer)");
  test::expect_error([] { parse_recompute("", "", 2); }, "--recompute-num-layers 2 needs --recompute-granularity full");
  // A misspelt granularity is named as such, before what it would have allowed.
  test::expect_error([] { parse_recompute("Selective", "", 1, {"moe_act"}); },
                     "--recompute-granularity: 'Selective' is not full or selective");
  test::expect_error([] { parse_recompute("selective", "", 1); }, "--recompute-granularity selective");
  test::expect_error([] { parse_recompute("full", "blocks", 1); }, "--recompute-method: 'blocks'");
  test::expect_error([] { parse_recompute("full", "uniform", -2); }, "--recompute-num-layers -2");
  test::expect_error([] { parse_recompute("", "uniform", 1); }, "needs --recompute-granularity full");
}

}  // namespace
}  // namespace quill
