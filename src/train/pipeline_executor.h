// The pipeline executor: runs one optimizer step's micro-batches through this rank's stage model by
// the stage's row of a schedule table (parallel/pipeline_schedule.h), exchanging activations and
// their gradients with the neighbouring stages over the pipeline group (a send and the next receive
// with the same neighbour as one send_recv). Parameter gradients accumulate into the stage's table;
// a forward-only table (evaluation) computes the losses and leaves every gradient as it was.
#pragma once

#include <vector>

#include "comm/comm.h"
#include "model/stage_model.h"
#include "parallel/pipeline_schedule.h"

namespace quill {

struct PipelineStepResult {
  double loss_sum = 0;  // last stage: the micro-batches' loss sums; other stages 0
  std::vector<std::vector<int64_t>> expert_tokens;  // this stage's MoE layers, summed over micro-batches
  int64_t combined_steps = 0, combined_switches = 0;  // combined 1F1B steps run, and their passes' hand-overs
};

// `micro_batches[m]` is micro-batch m (every stage sees the tokens; only the first embeds them and
// only the last scores them). `pp` is the pipeline group (its rank = stage index). Collective over pp.
// `hooks` (optional, model/pass_hooks.h) hear every forward's first reads of the weights, and the
// gradients written by the stage's last backward in its row of the table: the step's last gradient
// write of every parameter of the stage, after which a bucket's reduction may start.
PipelineStepResult run_pipeline_step(const StageModel& stage, const PipeSchedule& schedule, int stage_index, Comm* pp,
                                     const std::vector<MicroBatch>& micro_batches, const DeviceContext& ctx,
                                     int64_t hidden_size, PassHooks* hooks = nullptr);

}  // namespace quill
