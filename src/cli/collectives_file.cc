#include "cli/collectives_file.h"

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/file_util.h"
#include "parallel/grid.h"
#include "parallel/host_reduce.h"

namespace quill::cli {

namespace {

nlohmann::json rows_json(const std::vector<CollectiveRow>& rows) {
  nlohmann::json a = nlohmann::json::array();
  for (const CollectiveRow& r : rows)
    a.push_back({{"step", r.step}, {"phase", r.phase}, {"group", r.group}, {"group_size", r.group_size}, {"op", r.op}, {"calls", r.calls},
                 {"payload_bytes", r.payload_bytes}, {"sent_bytes", r.sent_bytes}, {"recv_bytes", r.recv_bytes}});
  return a;
}

std::vector<CollectiveRow> rows_from_json(const nlohmann::json& a) {
  std::vector<CollectiveRow> rows;
  for (const nlohmann::json& j : a) {
    CollectiveRow r;
    r.step = j.at("step");
    r.phase = j.at("phase");
    r.group = j.at("group");
    r.group_size = j.at("group_size");
    r.op = j.at("op");
    r.calls = j.at("calls");
    r.payload_bytes = j.at("payload_bytes");
    r.sent_bytes = j.at("sent_bytes");
    r.recv_bytes = j.at("recv_bytes");
    rows.push_back(r);
  }
  return rows;
}

}  // namespace

nlohmann::json layout_spec_json(const LayoutSpec& spec) {
  return {{"tp", spec.tp},   {"cp", spec.cp},   {"dp", spec.dp},   {"pp", spec.pp},
          {"ep", spec.ep},   {"etp", spec.etp}, {"order", spec.order},
          {"sequence_parallel", spec.sequence_parallel}, {"pp_layers", spec.pp_layers}};
}

LayoutSpec layout_spec_from_json(const nlohmann::json& j, const std::string& what) {
  try {
    LayoutSpec s;
    s.tp = j.at("tp");
    s.cp = j.at("cp");
    s.dp = j.at("dp");
    s.pp = j.at("pp");
    s.ep = j.at("ep");
    s.etp = j.at("etp");
    s.order = j.at("order");
    s.sequence_parallel = j.at("sequence_parallel");
    s.pp_layers = j.at("pp_layers").get<std::vector<int64_t>>();
    return s;
  } catch (const nlohmann::json::exception& e) {
    QUILL_FAIL("{}: layout_spec: {}", what, e.what());
  }
}

std::vector<CollectiveRow> collective_rows_from_json(const nlohmann::json& rows, const std::string& what) {
  try {
    return rows_from_json(rows);
  } catch (const nlohmann::json::exception& e) {
    QUILL_FAIL("{}: rows: {}", what, e.what());
  }
}

nlohmann::json comm_model_json(const plan::CommModelParams& p) {
  return {{"intra_node_busbw_gbps", p.intra_node.busbw_gbps}, {"intra_node_latency_us", p.intra_node.latency_us},
          {"inter_node_busbw_gbps", p.inter_node.busbw_gbps}, {"inter_node_latency_us", p.inter_node.latency_us},
          {"gpus_per_node", p.gpus_per_node},                 {"source", p.source}};
}

plan::CommModelParams comm_model_from_json(const nlohmann::json& j, const std::string& what) {
  try {
    plan::CommModelParams p;
    p.intra_node.busbw_gbps = j.at("intra_node_busbw_gbps");
    p.intra_node.latency_us = j.at("intra_node_latency_us");
    p.inter_node.busbw_gbps = j.at("inter_node_busbw_gbps");
    p.inter_node.latency_us = j.at("inter_node_latency_us");
    p.gpus_per_node = j.at("gpus_per_node");
    p.source = j.at("source");
    return p;
  } catch (const nlohmann::json::exception& e) {
    QUILL_FAIL("{}: {}", what, e.what());
  }
}

std::string collectives_json(const std::vector<std::pair<int, std::vector<CollectiveRow>>>& ranks,
                             const CollectivesRun& run) {
  nlohmann::json j;
  j["format"] = "quill-collectives-2";
  j["layout"] = run.spec.describe();
  j["layout_spec"] = layout_spec_json(run.spec);
  j["workload"] = {{"global_batch", run.global_batch}, {"row_tokens", run.row_tokens}};
  j["device"] = run.device;
  j["world_size"] = run.spec.world();
  j["simulated_rank"] = run.simulated_rank >= 0 ? nlohmann::json(run.simulated_rank) : nlohmann::json(nullptr);
  j["standin_comm_model"] = run.standin_comm ? comm_model_json(*run.standin_comm) : nlohmann::json(nullptr);
  nlohmann::json overlap = nlohmann::json::object();
  for (const auto& [group, t] : run.standin_overlap) overlap[group] = {{"comm_s", t.comm_s}, {"hidden_s", t.hidden_s}};
  j["standin_overlap"] = run.standin_overlap.empty() ? nlohmann::json(nullptr) : overlap;
  nlohmann::json loopback = nlohmann::json::array();
  for (const LoopbackTime& t : run.loopback_times)
    loopback.push_back({{"step", t.step}, {"phase", t.phase}, {"seconds", t.seconds}});
  j["loopback_copy_s"] = run.simulated_rank >= 0 ? loopback : nlohmann::json(nullptr);
  j["definitions"] = {
      {"rows", "per rank, one row per (step, group, op): every call this rank made of op on its communicator of "
               "that group during that training step"},
      {"step", "the optimizer step (0-based); -1: outside the steps (layout set-up, argument agreement, the closing "
               "exchange of peaks)"},
      {"phase", "passes: during the step's forward and backward passes (tensor, sequence and expert parallelism, the "
                "pipeline's exchanges); optimizer: the rest of the step (loss and count sums, gradient reduction, "
                "norm, weight all-gather); outside: step -1"},
      {"workload", "the run's rows per step (global_batch) and tokens per row, from which a projection starts"},
      {"group", "the communicator's name (world, tp, cp, dp, dp-cp, pp, ep, etp, edp); group_size its ranks; "
                "groups lists each group of this rank with more than one rank by name, with its world ranks"},
      {"payload_bytes", "summed over the calls: the operation's size as nccl-tests reports it (all_reduce and "
                        "broadcast: the tensor; all_gather and reduce_scatter: the whole gathered buffer; "
                        "all_to_all: the rows this rank sends, itself included; send/recv/send_recv: the messages)"},
      {"sent_bytes", "what this rank puts on the wire under the ring algorithms (all_reduce 2(p-1)/p of the "
                     "payload, all_gather and reduce_scatter (p-1)/p, all_to_all what goes to other ranks, "
                     "point to point the message; copies to itself excluded)"},
      {"recv_bytes", "what this rank takes off the wire, by the same rules"},
      {"simulated_rank", "null: every rank of a real run; R: the one rank run by quill train --simulate-rank R "
                         "(collectives served by a loopback communicator: bytes exact, values not)"},
      {"standin_comm_model", "null: the collectives took no time of their own (or their real time, in a real run); "
                             "otherwise quill train --simulate-comm-time gave each the time of this communication "
                             "model on a stand-in queue (docs/simulate-rank.md)"},
      {"standin_overlap", "null, or per group as the CPU's host clock saw the stand-ins over the whole run: comm_s, "
                          "their seconds on their queues; hidden_s, of those the part while the rank was not waiting "
                          "for one (a GPU run's op profile says the same per profiled step)"},
      {"loopback_copy_s", "null for a real run; for a simulated rank, per step and phase, the seconds its loopback "
                          "communicator's copies took (the host clock on the CPU, events on the compute stream on a "
                          "GPU): they stand in for the collectives' data movement, which a projection models apart, "
                          "so it takes them off the measured compute"}};
  // Each rank's groups by name with their world ranks, so that a model can tell the groups inside a
  // node from those across nodes.
  const Grid grid(run.spec.world(), run.spec);
  nlohmann::json all = nlohmann::json::array();
  for (const auto& [rank, rows] : ranks) {
    nlohmann::json groups = nlohmann::json::object();
    for (GroupKind kind : all_group_kinds()) {
      const RankGroup g = grid.group(kind, rank);
      if (g.size() > 1) groups[group_kind_name(kind)] = g.ranks;
    }
    all.push_back({{"rank", rank}, {"groups", groups}, {"rows", rows_json(rows)}});
  }
  j["ranks"] = all;
  return j.dump(1) + "\n";
}

void write_collectives_file(const std::string& out_dir, const CollectiveLedger& ledger, Comm* world, int rank,
                            const CollectivesRun& run) {
  const std::vector<CollectiveRow> mine = ledger.rows();
  std::vector<std::pair<int, std::vector<CollectiveRow>>> ranks;
  if (world == nullptr || world->size() == 1) {
    ranks.emplace_back(rank, mine);
  } else {
    QUILL_CHECK(world->device() == Device::CPU, "collectives.json: the gathering needs a CPU communicator");
    const std::vector<std::string> texts = all_gather_strings(world, DeviceContext::cpu(), rows_json(mine).dump());
    for (size_t r = 0; r < texts.size(); ++r)
      ranks.emplace_back(static_cast<int>(r), rows_from_json(nlohmann::json::parse(texts[r])));
  }
  if (rank != 0 && run.simulated_rank < 0) return;
  CollectivesRun with_times = run;
  if (run.simulated_rank >= 0) with_times.loopback_times = ledger.loopback_times();
  write_file_atomic(out_dir + "/collectives.json", collectives_json(ranks, with_times));
}

}  // namespace quill::cli
