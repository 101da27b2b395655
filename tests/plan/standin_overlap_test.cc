// The host clock's record turned into each group's time on its queues and the part of it beside the
// rank's own work (plan/standin_timing.h: standin_overlap_by_group), by hand: a span the caller waited
// through entirely is exposed, one it never waited on is hidden, and waits that cover parts of spans of
// two groups at once count against both.
#include <gtest/gtest.h>

#include "plan/standin_timing.h"

namespace {

TEST(StandInOverlap, EachSpanIsHiddenOutsideTheCallersWaits) {
  quill::StandInRecord record;
  record.spans = {{"tp", 0.0, 1.0},   // waited on from 0.6: hidden 0.6
                  {"tp", 2.0, 3.0},   // waited through: hidden 0
                  {"ep", 0.5, 2.5},   // the waits [0.6, 1.0] and [2.0, 3.0) cover 0.4 + 0.5: hidden 1.1
                  {"dp-cp", 4.0, 5.0}};  // never waited on: hidden 1
  record.waits = {{0.6, 1.0}, {2.0, 3.0}};
  const auto by_group = quill::plan::standin_overlap_by_group(record);
  ASSERT_EQ(by_group.size(), 3u);
  EXPECT_DOUBLE_EQ(by_group.at("tp").comm_s, 2.0);
  EXPECT_NEAR(by_group.at("tp").hidden_s, 0.6, 1e-12);
  EXPECT_DOUBLE_EQ(by_group.at("ep").comm_s, 2.0);
  EXPECT_NEAR(by_group.at("ep").hidden_s, 1.1, 1e-12);
  EXPECT_NEAR(by_group.at("dp-cp").hidden_s, 1.0, 1e-12);
  EXPECT_TRUE(quill::plan::standin_overlap_by_group({}).empty());
}

}  // namespace
