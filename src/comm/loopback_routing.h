// Routing models for a simulated rank's token exchange (`quill train --simulate-rank R
// --simulate-routing balanced|METRICS`, docs/simulate-rank.md). Expert parallelism sends each routed
// row to the rank holding its expert; a simulated rank has no peers, so the loopback's "ep"
// communicator asks one of these what every peer would send to this rank's experts (LoopbackRouting
// in comm/loopback_comm.h). From itself a rank always receives its own counts.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "comm/loopback_comm.h"

namespace quill {

// Every peer routes as many rows as this rank (sum of its counts, P), spread evenly over the E
// experts: expert g gets floor(P / E) rows, plus one for g < P mod E.
std::shared_ptr<LoopbackRouting> balanced_routing();

// The per-expert counts of a run's metrics.jsonl (`expert_tokens`: per step, per MoE layer, the rows
// routed to each expert over the whole global batch).
struct RecordedRouting {
  // [step][layer][expert]: the file's steps (used in turn, cycling), the simulated stage's MoE layers
  // in the order its forward runs them, every expert of the model.
  std::vector<std::vector<std::vector<int64_t>>> counts;
  int64_t micro_batches = 1;  // count exchanges per MoE layer per step: this rank's micro-batches
  // The rows one expert-parallel group routes per step, from the file's: counts x scale_num / scale_den
  // (the simulated workload's tokens over the file's, and 1 / edp: edp groups share the tokens).
  int64_t scale_num = 1, scale_den = 1;
};
// Per step and layer the rows this rank's experts receive in all are the file's (scaled), less what
// this rank routes to them itself: the other peers share it evenly, floor(X / (size m)) each per
// micro-batch, the last micro-batch of the step taking what is left (never below 0). So when the file
// is of the same layout and rows, and this rank routes as the real one did, every step's bytes are the
// real run's. Calls are taken in order: layer = call mod layers, then micro-batch, then step.
std::shared_ptr<LoopbackRouting> recorded_routing(RecordedRouting recorded);

}  // namespace quill
