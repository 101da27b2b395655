// Pipeline schedules as data: per stage, the order of forward and backward passes of the
// micro-batches, and the point-to-point exchanges around them. A table is built by a function and
// run by one executor; this file also checks a table (order, matching exchanges, no deadlock under
// rendezvous send/recv, in-flight activations).
//
// 1F1B (Megatron's non-interleaved schedule): stage s of pp runs w = min(pp - s - 1, M) warm-up
// forwards, then alternates one forward and one backward while forwards remain, then the remaining
// backwards; at most min(pp - s, M) micro-batches' activations are alive on stage s.
//
// Exchanges: a forward of micro-batch m receives its input from stage s-1 and sends its output to
// s+1; a backward receives its output gradient from s+1 and sends its input gradient to s-1. The
// send after one pass and the receive before the next, when both are with the same neighbour, are
// one exchange (Megatron's send_forward_recv_backward / send_backward_recv_forward: Comm::send_recv),
// which is what keeps rendezvous send/recv free of deadlock.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace quill {

enum class PipePass { Forward, Backward };

struct PipeStep {
  PipePass pass;
  int micro;
  // A forward that runs interleaved with the backward right after it, as one combined step (the combined
  // 1F1B of --overlap-moe-expert-parallel-comm: each pass's token exchanges travel while the other computes).
  bool combined_with_next = false;
};

// One point-to-point exchange of a stage: messages sent and received, each an activation (forward)
// or a gradient (backward) of one micro-batch, with the stage before (-1) or after (+1).
struct PipeMessage {
  bool send;
  PipePass kind;  // Forward: an activation; Backward: a gradient
  int micro;
  int peer;  // stage index
  bool operator==(const PipeMessage&) const = default;
};
struct PipeExchange {
  std::vector<PipeMessage> messages;  // one, or a send and a receive with the same peer at once
};

// What a stage does, in order: a pass, or an exchange.
struct PipeAction {
  bool is_pass;
  PipeStep step;          // when is_pass
  PipeExchange exchange;  // otherwise
};

struct PipeSchedule {
  int stages = 1, micro_batches = 1;
  bool forward_only = false;  // forward passes only (forward_only_schedule): no backward, no gradients
  std::vector<std::vector<PipeStep>> passes;     // per stage, in order
  std::vector<std::vector<PipeAction>> actions;  // per stage: passes with their exchanges
};

// Throws naming the argument when stages or micro_batches is below 1.
PipeSchedule one_f_one_b(int stages, int micro_batches);
// The combined 1F1B of one stage (Megatron-Core's --overlap-moe-expert-parallel-comm without a pipeline):
// F0, then the forward of micro-batch i+1 combined with the backward of i, then the last backward; two
// micro-batches' activations alive at the peak. A pipeline of several stages needs Megatron's interleaved
// (virtual) stages for it (the receive of one pass's input waits for the other pass's send otherwise), which
// quill does not have: stages > 1 is refused, naming why.
PipeSchedule combined_one_f_one_b(int stages, int micro_batches);
// Evaluation (Megatron's forward_only): every stage forwards micro-batches 0 .. M-1 in order, each
// received from the stage before and sent to the stage after; nothing flows back. A stage holds one
// micro-batch's activations at a time.
PipeSchedule forward_only_schedule(int stages, int micro_batches);

// The index in actions[stage] of the stage's last backward pass (1F1B: the last micro-batch's, at the
// end of its cool-down), after which no gradient of the stage's parameters is written in the step:
// where --overlap-grad-reduce starts the buckets' reductions. actions[stage].size() when the row has
// no backward (a forward-only table).
size_t last_backward_action(const PipeSchedule& schedule, int stage);

struct PipeScheduleCheck {
  std::string problem;                    // empty when the schedule is sound
  std::vector<int> peak_in_flight;        // per stage: most micro-batches forwarded, not yet backwarded
  int rounds = 0;                         // simulated rounds until every stage finished
};
// Every micro-batch forwarded and backwarded once per stage (forwarded only, in a forward_only
// table), forward before backward; every send
// matched by its receive in the same order; and a simulation of rendezvous exchanges (an exchange
// completes only when the peer is at the complementary one) that finishes.
PipeScheduleCheck check_schedule(const PipeSchedule& schedule);

}  // namespace quill
