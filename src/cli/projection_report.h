// The projection of a whole layout from simulated ranks' runs (docs/comm-model.md): each run directory
// of `quill train --simulate-rank R` holds its rank's measured compute (summary.json: every step's time
// and its passes' share) and the exact bytes of its collectives (collectives.json); plan/projection.h
// turns them into the layout's step time, and the recipe's metric formulas (recipe/metrics.h) into
// tokens/s/GPU, MFU (6N) and $ per million tokens. Printed at the end of a simulated run (written to
// OUT/projection.json) and by `quill project DIR... [flags]`.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "plan/comm_model.h"

namespace quill::cli {

// The model's parameters as flags (defaults: plan::h200_comm_params), the price and the workload.
struct ProjectionFlags {
  int gpus_per_node = 8;
  std::optional<double> intra_busbw_gbps, inter_busbw_gbps, intra_latency_us, inter_latency_us;
  std::optional<double> price_per_gpu_hour;
  int64_t global_batch = 0;  // rows per step of the projected workload; 0: the runs'
};
// --gpus-per-node, --nvlink-busbw-gbps (--intra-node-busbw-gbps), --internode-busbw-gbps
// (--inter-node-busbw-gbps), the two latencies, --price-per-gpu-hour; with `workload` also
// --global-batch (quill project; a simulated run projects its own).
void add_projection_flags(CLI::App* cmd, ProjectionFlags& flags, bool workload);
// The model's parameters: the H200 figures with the flags' overrides (named in `source`).
plan::CommModelParams comm_params(const ProjectionFlags& flags);

struct ProjectionReport {
  std::string text;     // the table and the lines for the terminal
  nlohmann::json json;  // OUT/projection.json
};
// `dirs`: run directories of one layout, at most one simulated rank per pipeline stage. A quill::Error
// naming the file and field for a directory that is no simulated run, runs of different models, layouts,
// workloads, recompute or devices (the field and both directories), or bad flags.
ProjectionReport project_runs(const std::vector<std::string>& dirs, const ProjectionFlags& flags);
// Writes out_dir/projection.json atomically.
void write_projection(const std::string& out_dir, const ProjectionReport& report);

}  // namespace quill::cli
