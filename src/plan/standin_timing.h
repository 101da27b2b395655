// The timed stand-ins' time of one call (comm/standin_clock.h) from the communication model the
// projection uses (plan/comm_model.h): the call as a ledger row of one call, its group placed over
// nodes of params.gpus_per_node, row_time's latency plus transfer. So a simulated step's stand-ins
// add up to the modelled communication of its ledger rows, which the projection prints beside it.
#pragma once

#include <memory>

#include "comm/standin_clock.h"
#include "plan/comm_model.h"

namespace quill::plan {

std::shared_ptr<const StandInTiming> comm_model_timing(CommModelParams params);

}  // namespace quill::plan
