#include "ops/comm_profile.h"

#include <gtest/gtest.h>

namespace quill {
namespace {

CommSpanTimes span(std::string label, std::string group, const char* op, int p, int64_t payload, int64_t bus, double b,
                   double e) {
  return CommSpanTimes{std::move(label), CommSpanInfo{std::move(group), op, p, payload, bus}, b, e};
}

TEST(CommProfile, GroupsByLabelGroupAndOpAndSumsTimesBytesAndHiddenParts) {
  // Compute busy on [0, 10) and [20, 30).
  const BusyTimeline compute({{0, 10}, {20, 30}});
  const std::vector<CommSpanTimes> spans = {
      span("tp.all_gather", "tp", "all_gather", 2, 1000, 500, 10, 12),   // in a gap: hidden 0
      span("tp.all_gather", "tp", "all_gather", 2, 1000, 500, 12, 14),   // in a gap: hidden 0
      span("ep.dispatch", "ep", "all_to_all", 2, 4000, 2000, 5, 15),     // half under compute
      span("", "world", "all_reduce", 2, 8, 8, 25, 26),                  // outside ops, all under compute
  };
  const std::vector<CommProfileRow> rows = comm_profile_rows(spans, compute);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].label, "ep.dispatch");  // longest first
  EXPECT_DOUBLE_EQ(rows[0].comm_ms, 10);
  EXPECT_DOUBLE_EQ(rows[0].hidden_ms, 5);
  EXPECT_DOUBLE_EQ(rows[0].bus_gbps(), 2000 / (10 * 1e6));
  EXPECT_EQ(rows[1].label, "tp.all_gather");
  EXPECT_EQ(rows[1].calls, 2);
  EXPECT_EQ(rows[1].group_size, 2);
  EXPECT_DOUBLE_EQ(rows[1].payload_bytes, 2000);
  EXPECT_DOUBLE_EQ(rows[1].bus_bytes, 1000);
  EXPECT_DOUBLE_EQ(rows[1].comm_ms, 4);
  EXPECT_DOUBLE_EQ(rows[1].hidden_ms, 0);
  EXPECT_EQ(rows[2].label, "(outside ops)");
  EXPECT_DOUBLE_EQ(rows[2].hidden_ms, 1);
}

TEST(CommProfile, TableAndJsonNameEveryRowAndNothingForNoRows) {
  EXPECT_EQ(comm_profile_table({}, 10), "");
  EXPECT_EQ(comm_profile_json({}), "[]");
  const std::vector<CommProfileRow> rows =
      comm_profile_rows({span("pp.send_recv", "pp", "send_recv", 2, 1 << 20, 1 << 20, 0, 1)}, BusyTimeline({{0, 0.25}}));
  const std::string table = comm_profile_table(rows, 4);
  EXPECT_NE(table.find("pp.send_recv"), std::string::npos);
  EXPECT_NE(table.find("pp(2)"), std::string::npos);
  EXPECT_NE(table.find("25.0"), std::string::npos);  // hidden %
  const std::string json = comm_profile_json(rows);
  EXPECT_NE(json.find("\"hidden_ms\": 0.250000"), std::string::npos);
  EXPECT_NE(json.find("\"bus_gbps\": 1.0486"), std::string::npos);  // 2^20 bytes in 1 ms
}

}  // namespace
}  // namespace quill
