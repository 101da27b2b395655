// The projection of a layout's step time (docs/comm-model.md): from one simulated rank per pipeline
// stage (or fewer: stages without one borrow a like stage's figures, noted), each with its measured
// compute (the forward and backward passes of its micro-batches, the rest of the step) and the exact
// bytes of its collectives (collective ledger rows, per step and phase), the communication model turns
// the bytes into time and the step is laid out as quill runs it:
//
// - from runs without timed stand-ins, every collective is on the critical path ("none overlapped"): the
//   passes' collectives are added to each micro-batch, the data-parallel gradient reductions and weight
//   gathers (groups dp-cp and edp, whichever phase started them) to the optimizer phase;
// - from runs with timed stand-ins (`--simulate-comm-time`: each collective took its modelled time on a
//   queue beside compute), the measured passes and rest already hold the collectives' exposed part, so the
//   step is laid out from them as measured (the pipeline's messages taken out of the passes: the replay
//   adds them), and the none-overlapped step is given beside it from the compute that remains when each
//   group's exposed time is taken out (its modelled time less the share the op profile saw hidden);
// - the passes follow quill's 1F1B table (parallel/pipeline_schedule.h), replayed with each stage's
//   forward and backward times and rendezvous exchanges (a message starts when both stages reach it),
//   which gives the pipeline's fill and drain (the bubble) and the waits for slower stages;
// - after the passes every rank meets in world all-reduces (the loss and the expert counts, then the
//   gradient norm), so the optimizer phase starts when the slowest stage's passes end and the step ends
//   with the slowest stage's optimizer phase.
//
// Pure functions: the caller reads the run directories (cli/projection_report.h).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "comm/collective_ledger.h"
#include "parallel/layout_spec.h"
#include "parallel/pipeline_schedule.h"
#include "plan/comm_model.h"

namespace quill::plan {

// What one rank's run measured and counted.
struct RankMeasurement {
  int rank = 0;                    // world rank
  int stage = 0;                   // its pipeline stage
  int64_t micro_batches = 0;       // per step in that run (its data-parallel share of the global batch)
  double passes_s = 0;             // per step: forward and backward passes (compute; median over the measured steps)
  double rest_s = 0;               // per step: the rest of the step (compute)
  // The collective rows of its measured steps (the ledger's, every phase), and how many steps they span.
  std::vector<CollectiveRow> rows;
  int64_t steps = 1;
  std::map<std::string, std::vector<int>> groups;  // name -> world ranks (collectives.json's "groups")
  // Of its passes, the backward's share; negative: the request's backward_share. A modelled rank knows it
  // (quill tune: the last stage's forward also runs the head's backward).
  double backward_share = -1;
  // Timed stand-ins (--simulate-comm-time): passes_s and rest_s include each collective's modelled time less
  // what of it ran beside compute.
  bool timed = false;
  // Per group ("tp", "ep", "dp-cp", ...): of its collectives' time on their streams in the profiled step, the
  // share while the compute stream ran ops (the op profile's collectives table). A group not listed: unknown
  // (counted as exposed).
  std::map<std::string, double> hidden_share;
};

struct ProjectionRequest {
  LayoutSpec spec;
  std::vector<RankMeasurement> ranks;  // at most one per stage; at least one
  int64_t micro_batches = 0;           // per step and data-parallel rank of the projected workload
  CommModelParams comm;
  // Of a micro-batch's pass time, the backward's share: 2/3 (two GEMMs per forward GEMM: the 6N count's
  // 2N forward, 4N backward, docs/recipes-and-measurement.md); only the pipeline's fill and drain depend on it.
  double backward_share = 2.0 / 3.0;
};

// One communicator group's modelled time per step on one stage.
struct GroupTime {
  std::string phase, group, op;
  int group_size = 1;
  bool inter_node = false;
  int64_t calls = 0;        // per projected step
  int64_t wire_bytes = 0;   // per projected step: max(sent, recv)
  double seconds = 0;       // per projected step
  double hidden_share = -1; // of seconds, the part beside compute (timed runs with an op profile); -1 unknown
};

struct StageProjection {
  int stage = 0;
  int from_rank = 0;        // the measured rank whose figures it uses
  bool borrowed = false;    // no rank of this stage was measured: a like stage's figures
  double forward_s = 0, backward_s = 0;  // per micro-batch: compute plus the passes' collectives
  double passes_compute_s = 0;           // per micro-batch, measured
  double passes_comm_s = 0;              // per micro-batch, modelled (tensor, sequence, expert parallelism)
  double message_s = 0;                  // one pipeline message to a neighbour, modelled
  double pipeline_comm_s = 0;            // per step: all its pipeline messages, modelled (in the replay)
  double optimizer_compute_s = 0;        // per step, measured
  double optimizer_comm_s = 0;           // per step, modelled
  double pipeline_end_s = 0;             // when its last pass ends, in the replay
  double passes_hidden_s = 0;            // timed: per micro-batch, of passes_comm_s the part beside compute
  double optimizer_hidden_s = 0;         // timed: per step, of optimizer_comm_s the part beside compute
  std::vector<GroupTime> groups;
};

struct Projection {
  double step_s = 0;
  double pipeline_s = 0;          // the slowest stage's passes, bubble and waits included
  double optimizer_s = 0;         // the slowest stage's optimizer phase
  double compute_s = 0;           // of the step, the slowest stage's measured compute (passes + rest)
  double exposed_comm_s = 0;      // of the step, modelled communication on the critical path
  double bubble_s = 0;            // step_s - compute_s - exposed_comm_s: waiting (fill, drain, slower stages)
  double bubble_fraction_formula = 0;  // (pp - 1) / m (Narayanan et al. 2021, §2.2.1), for comparison
  // From timed runs: the step laid out from the measured passes (step_s), and beside it the same compute
  // with every collective exposed (none_overlapped_step_s; equal to step_s from untimed runs). Of the
  // critical stage's modelled communication (modelled_comm_s), hidden_comm_s ran beside compute.
  bool timed = false;
  double none_overlapped_step_s = 0;
  double modelled_comm_s = 0, hidden_comm_s = 0;
  int64_t micro_batches = 0;
  std::vector<StageProjection> stages;
  std::vector<std::string> notes;
};

Projection project_step(const ProjectionRequest& request);

// The 1F1B table replayed in time: per stage, forward and backward times per micro-batch, and the time
// of one message between stages s and s+1 (message_s[s], size stages - 1). Returns when each stage's
// last action ends. Throws if the table deadlocks (it cannot: check_schedule).
std::vector<double> replay_pipeline(const PipeSchedule& schedule, const std::vector<double>& forward_s,
                                    const std::vector<double>& backward_s, const std::vector<double>& message_s);

}  // namespace quill::plan
