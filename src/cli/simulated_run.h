// One run directory of `quill train --simulate-rank R` read back as the projection's measurement of its
// rank (plan/projection.h): the layout and workload it ran (collectives.json), its measured compute (the
// median over summary.json's measured steps of the passes and of the rest of the step), the collective rows
// of those steps, its groups and its allocator peak. What `quill project` combines into a layout's step,
// and what `quill tune --measure` puts in place of its modelled compute (cli/tune_measure.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "parallel/layout_spec.h"
#include "plan/comm_model.h"
#include "plan/projection.h"

namespace quill::cli {

struct SimulatedRun {
  std::string dir, device;  // device: what computed (collectives.json's "device")
  LayoutSpec spec;
  int64_t global_batch = 0, row_tokens = 0, active_params = 0;  // active_params: the model (summary.json)
  std::string recompute;          // the activation recompute it ran (summary.json)
  int64_t peak_bytes = -1;        // the rank's allocator peak (summary.json), -1 when absent
  int64_t device_used_bytes = -1; // cudaMemGetInfo total - free after the last step (GPU runs), -1 when absent
  bool gpu_peak = false;          // the peak is the CUDA allocator's
  plan::RankMeasurement m;        // micro_batches: global_batch / dp; stage: the rank's on the layout's grid
  // Timed stand-ins (m.timed): the model whose time they took (collectives.json standin_comm_model); and
  // m.hidden_share per group from the op profile of the run's profiled step, when it has one
  // (op_profile_step{N}.json, "collectives"), else from the host clock's record of the whole run
  // (collectives.json standin_overlap, CPU runs).
  std::optional<plan::CommModelParams> standin_comm;
  std::string hidden_source;  // the profile file the hidden shares come from; empty: none
  // The loopback's copies (collectives.json loopback_copy_s), medians over the measured steps as passes_s and
  // rest_s take them: m.passes_s and m.rest_s are the measured times less these. loopback_measured false: a
  // run of a quill before they were timed (nothing taken off).
  bool loopback_measured = false;
  double loopback_passes_s = 0, loopback_rest_s = 0;
};

// A quill::Error naming the file and field when `dir` holds no simulated run (a real run's collectives,
// a missing or malformed summary.json or collectives.json, a global batch that does not split over dp, a
// timed run without its stand-ins' model).
SimulatedRun read_simulated_run(const std::string& dir);

}  // namespace quill::cli
