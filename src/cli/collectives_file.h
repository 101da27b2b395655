// OUT/collectives.json: the collective ledger (comm/collective_ledger.h) of every rank of a run, or
// of the one simulated rank (`quill train --simulate-rank R`), per step, group and operation: calls,
// payload and wire bytes. The input of a communication model (docs/simulate-rank.md).
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "comm/collective_ledger.h"
#include "comm/comm.h"
#include "parallel/layout_spec.h"
#include "plan/comm_model.h"
#include "plan/standin_timing.h"

namespace quill::cli {

struct CollectivesRun {
  LayoutSpec spec;
  int simulated_rank = -1;  // -1: a real run
  int64_t global_batch = 0;  // rows per step (the workload a projection starts from)
  int64_t row_tokens = 0;
  std::string device;  // what computed: launch.h's device_description (a projection's default price)
  // --simulate-comm-time: the communication model whose time each collective took on its stand-in (the
  // projection of the run must use the same); none without timed stand-ins.
  std::optional<plan::CommModelParams> standin_comm;
  // The stand-ins as a recording clock saw them (the CPU's host clock), per group: seconds on its queues
  // over the whole run, and of them the part beside the rank's own work; empty when nothing recorded.
  std::map<std::string, plan::StandInGroupTime> standin_overlap;
  // A simulated rank's loopback copies per step and phase (CollectiveLedger::loopback_times; write_collectives_file
  // takes them from its ledger): what a projection takes off the measured compute. Empty for a real run.
  std::vector<LoopbackTime> loopback_times;
};

// A communication model's parameters as JSON ("intra_node_busbw_gbps", ..., "gpus_per_node", "source"),
// and back (a quill::Error naming `what` and the field).
nlohmann::json comm_model_json(const plan::CommModelParams& p);
plan::CommModelParams comm_model_from_json(const nlohmann::json& j, const std::string& what);

// The layout as collectives.json's "layout_spec" writes it, and back (a quill::Error naming `what`
// and the field when one is missing or wrong).
nlohmann::json layout_spec_json(const LayoutSpec& spec);
LayoutSpec layout_spec_from_json(const nlohmann::json& j, const std::string& what);
// A collectives.json's rows array, back (a quill::Error naming `what` when a field is missing).
std::vector<CollectiveRow> collective_rows_from_json(const nlohmann::json& rows, const std::string& what);

// Collective over `world` (every rank calls it; null or one rank: this rank's table only): every
// rank's table onto world rank 0, which writes out_dir/collectives.json atomically. `world` must
// be a CPU communicator that does not count into `ledger` (the gathering is no part of the run).
void write_collectives_file(const std::string& out_dir, const CollectiveLedger& ledger, Comm* world,
                            int rank, const CollectivesRun& run);

// The file's text for the given ranks' rows (rank index, rows), for tests and the writer.
std::string collectives_json(const std::vector<std::pair<int, std::vector<CollectiveRow>>>& ranks,
                             const CollectivesRun& run);

}  // namespace quill::cli
