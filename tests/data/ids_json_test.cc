// ids_json (src/data/ids_json.h): the same bytes as nlohmann::json's dump of the ids, which is what
// `quill data encode` printed before it had its own writer.
#include "data/ids_json.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <vector>

namespace quill {
namespace {

std::string reference(const std::vector<uint32_t>& ids) { return nlohmann::json(ids).dump(); }

TEST(IdsJson, EdgeValues) {
  EXPECT_EQ(ids_json({}), "[]");
  std::vector<uint32_t> one{0};
  EXPECT_EQ(ids_json(one), "[0]");
  std::vector<uint32_t> edges{0, 9, 10, 99, 100, 199999, 200018, 999999999, 1000000000, 4294967295u};
  EXPECT_EQ(ids_json(edges), "[0,9,10,99,100,199999,200018,999999999,1000000000,4294967295]");
  EXPECT_EQ(ids_json(edges), reference(edges));
  std::vector<uint32_t> widest(1000, 4294967295u);  // every id at the worst-case width
  EXPECT_EQ(ids_json(widest), reference(widest));
}

TEST(IdsJson, RandomIdsOfEveryWidth) {
  std::mt19937_64 rng(7);
  std::vector<uint32_t> ids;
  for (int i = 0; i < 100000; ++i) {
    int digits = 1 + static_cast<int>(rng() % 10);
    uint64_t hi = 1;
    for (int d = 0; d < digits; ++d) hi *= 10;
    ids.push_back(static_cast<uint32_t>(std::min<uint64_t>(rng() % hi, 4294967295u)));
  }
  EXPECT_EQ(ids_json(ids), reference(ids));
}

}  // namespace
}  // namespace quill
