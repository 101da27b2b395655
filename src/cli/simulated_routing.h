// `--simulate-routing balanced|METRICS` of `quill train --simulate-rank R` with expert parallelism
// (docs/simulate-rank.md): the routing model the loopback's token exchange answers with
// (comm/loopback_routing.h), balanced or from the per-expert counts of a run's metrics.jsonl.
#pragma once

#include <memory>
#include <string>

#include "comm/loopback_comm.h"
#include "model/config.h"
#include "parallel/layout_spec.h"

namespace quill::cli {

// `flag`: "balanced" or a metrics.jsonl path. The file must be of the same model (its MoE layer and
// expert counts; a quill::Error names the file, line and field otherwise). Its counts are scaled to this
// workload's tokens per step and shared by the layout's edp expert-parallel groups.
std::shared_ptr<LoopbackRouting> simulated_routing(const std::string& flag, const InklingConfig& config,
                                                   const LayoutSpec& spec, int rank, int64_t global_batch,
                                                   int64_t row_tokens);

}  // namespace quill::cli
