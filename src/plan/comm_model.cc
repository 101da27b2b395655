#include "plan/comm_model.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "base/error.h"

namespace quill::plan {

CommModelParams h200_comm_params() {
  CommModelParams p;
  // NVLink 4: 450 GB/s line rate per direction; NCCL reaches ~370 GB/s bus bandwidth with its protocol
  // overhead, seen as busbw of every operation but an NVLink-SHARP all-reduce (sjeaugey, NCCL team,
  // NVIDIA/nccl-tests#212, 2024-05-06). quill runs with NVLS off (NCCL_NVLS_ENABLE=0, as the seed), so
  // its all-reduces are rings too.
  p.intra_node = {370.0, 8.0};
  // NDR InfiniBand, 400 Gb/s per GPU: "46-48 GB/s per NIC" through NCCL (AddyLaddy, NCCL team,
  // NVIDIA/nccl-tests#290, 2025-03-03); 47 taken. Latency: NCCL's own tuning estimate of a small
  // multi-node all-reduce on H100 nodes, 25.9 us (NVIDIA/nccl#1453's NCCL_DEBUG=TUNING log).
  p.inter_node = {47.0, 26.0};
  p.gpus_per_node = 8;
  p.source =
      "published NCCL figures, not measured by quill (one GPU lent): NVLink 4 ring busbw 370 GB/s "
      "(NVIDIA/nccl-tests#212), 8 us per call (4-GPU NVLink all-reduce 3.5 us, NVIDIA/nccl#1984, scaled by the "
      "ring's 7/3 hops); NDR 400 Gb/s per GPU 47 GB/s (NVIDIA/nccl-tests#290), 26 us per call (NVIDIA/nccl#1453); "
      "8 GPUs per node, NVLS off";
  return p;
}

GroupPlacement place_group(const std::vector<int>& world_ranks, int me, int gpus_per_node) {
  QUILL_CHECK(gpus_per_node >= 1, "--gpus-per-node {}: must be at least 1", gpus_per_node);
  const auto at = std::find(world_ranks.begin(), world_ranks.end(), me);
  QUILL_CHECK(at != world_ranks.end(), "comm model: rank {} is not in its group's ranks", me);
  GroupPlacement g;
  g.size = static_cast<int>(world_ranks.size());
  std::map<int, int> per_node;
  for (int r : world_ranks) ++per_node[r / gpus_per_node];
  g.nodes = static_cast<int>(per_node.size());
  g.min_ranks_per_node = g.size;
  for (const auto& [node, n] : per_node) g.min_ranks_per_node = std::min(g.min_ranks_per_node, n);
  const int my_node = me / gpus_per_node;
  g.ranks_on_my_node = per_node[my_node];
  const size_t i = static_cast<size_t>(at - world_ranks.begin());
  for (size_t j : {i - 1, i + 1})  // size_t wraps below 0: out of range either way
    if (j < world_ranks.size() && world_ranks[j] / gpus_per_node != my_node) g.neighbour_off_node = true;
  return g;
}

namespace {

bool point_to_point(const std::string& op) { return op == "send" || op == "recv" || op == "send_recv"; }

void check_op(const std::string& op) {
  static const char* const known[] = {"all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast",
                                      "send",       "recv",           "send_recv",  "barrier",    "split"};
  for (const char* k : known)
    if (op == k) return;
  QUILL_FAIL("comm model: unknown collective '{}'", op);
}

double seconds(int64_t bytes, double gbps) { return gbps > 0 ? static_cast<double>(bytes) / (gbps * 1e9) : 0.0; }

}  // namespace

double effective_busbw_gbps(const std::string& op, const GroupPlacement& g, const CommModelParams& p, bool* inter) {
  check_op(op);
  bool across = g.nodes > 1;
  double bw = p.intra_node.busbw_gbps;
  if (point_to_point(op)) {
    across = g.neighbour_off_node;
    if (across) bw = p.inter_node.busbw_gbps;
  } else if (across) {
    // A ring crosses every node boundary once per channel; each of the node's k ranks of the group
    // drives its own port, so the ring's bus bandwidth is k ports', up to NVLink's.
    bw = std::min(p.intra_node.busbw_gbps, g.min_ranks_per_node * p.inter_node.busbw_gbps);
  }
  if (inter) *inter = across;
  return bw;
}

RowTime row_time(const CollectiveRow& row, const GroupPlacement& g, const CommModelParams& p) {
  RowTime t;
  const double bw = effective_busbw_gbps(row.op, g, p, &t.inter_node);
  if (row.op == "split" || g.size <= 1) return t;  // communicator set-up; a group of one moves nothing
  t.latency_s = static_cast<double>(row.calls) * (t.inter_node ? p.inter_node.latency_us : p.intra_node.latency_us) * 1e-6;
  const int64_t wire = std::max(row.sent_bytes, row.recv_bytes);
  if (wire == 0) return t;
  if (row.op == "all_to_all" && g.nodes > 1) {
    // Peers on this rank's node over NVLink, the others through this rank's port, at once; the rows
    // taken as spread evenly over the peers (the ledger keeps totals per call, not per peer).
    const double off = static_cast<double>(g.size - g.ranks_on_my_node) / static_cast<double>(g.size - 1);
    const int64_t off_bytes = std::llround(off * static_cast<double>(wire));
    t.transfer_s = std::max(seconds(wire - off_bytes, p.intra_node.busbw_gbps), seconds(off_bytes, p.inter_node.busbw_gbps));
    t.busbw_gbps = t.transfer_s > 0 ? static_cast<double>(wire) / t.transfer_s / 1e9 : 0;
    return t;
  }
  t.busbw_gbps = bw;
  t.transfer_s = seconds(wire, bw);
  return t;
}

}  // namespace quill::plan
