// The timed stand-ins' time of one call (comm/standin_clock.h) from the communication model the
// projection uses (plan/comm_model.h): the call as a ledger row of one call, its group placed over
// nodes of params.gpus_per_node, row_time's latency plus transfer. So a simulated step's stand-ins
// add up to the modelled communication of its ledger rows, which the projection prints beside it. And the
// host clock's record turned into each group's hidden time (quill project's hidden shares of CPU runs).
#pragma once

#include <map>
#include <memory>
#include <string>

#include "comm/standin_clock.h"
#include "plan/comm_model.h"

namespace quill::plan {

std::shared_ptr<const StandInTiming> comm_model_timing(CommModelParams params);

// What a recording clock (the CPU's host clock) saw, per group: its stand-ins' seconds on their queues, and
// of them the part outside the caller's waits (beside its own work: hidden).
struct StandInGroupTime {
  double comm_s = 0, hidden_s = 0;
};
std::map<std::string, StandInGroupTime> standin_overlap_by_group(const StandInRecord& record);

}  // namespace quill::plan
