// The communication model (docs/comm-model.md): the time of a rank's collectives from the bytes the
// collective ledger counted (comm/collective_ledger.h), the size of the group and where its ranks sit
// (inside one node: NVLink; across nodes: the network), with NCCL's bus-bandwidth view of each
// operation plus a latency per call. Pure functions of their arguments; no globals.
//
// The bus-bandwidth factors are nccl-tests' (NVIDIA/nccl-tests doc/PERFORMANCE.md): a ring all-reduce
// of S bytes over n ranks takes S * 2(n-1)/n / B, an all-gather or reduce-scatter of a whole buffer S
// (and an all-to-all of S sent) S * (n-1)/n / B, a broadcast and a point-to-point message S / B, where
// B is the bus bandwidth of the links in the way. Those per-rank wire bytes are exactly what the ledger
// records as sent_bytes / recv_bytes (ring_all_reduce_bytes, ring_gather_bytes), so a row's transfer
// time is max(sent, recv) / B: the two directions of a link run at once.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm/collective_ledger.h"

namespace quill::plan {

// One tier of links, as a collective sees it.
struct LinkTier {
  double busbw_gbps = 0;  // bus bandwidth, GB/s (1e9 bytes per second), per rank
  double latency_us = 0;  // fixed cost of one call
};

struct CommModelParams {
  // Inside a node: NVLink 4 through NVSwitch (H100/H200 SXM, 8 per node), NVLink SHARP off.
  LinkTier intra_node;
  // Across nodes, per GPU: one network port per GPU (rail-optimised), so that a group with k ranks on
  // each node drives k ports at once (NCCL builds one ring channel per NIC).
  LinkTier inter_node;
  int gpus_per_node = 8;
  std::string source;  // where the figures come from (printed with every projection)
};

// The published H200 figures this model starts from (docs/comm-model.md, with their sources). Not
// measured by quill: its sessions are lent one GPU.
CommModelParams h200_comm_params();

// Where one rank's group sits: its world ranks (in the group's order, as collectives.json lists them)
// over nodes of gpus_per_node consecutive world ranks.
struct GroupPlacement {
  int size = 1;
  int nodes = 1;                  // distinct nodes the group spans
  int min_ranks_per_node = 1;     // ranks of the group on its least-populated node
  int ranks_on_my_node = 1;       // of the group, on this rank's node (this rank included)
  bool neighbour_off_node = false;  // a group neighbour (index +-1: a pipeline stage's peers) on another node
};
// `me`: this rank's world rank (must be in `world_ranks`). Throws naming the problem otherwise.
GroupPlacement place_group(const std::vector<int>& world_ranks, int me, int gpus_per_node);

// The modelled time of one ledger row (every call of one op on one group in one step and phase).
struct RowTime {
  double latency_s = 0;
  double transfer_s = 0;
  double busbw_gbps = 0;  // the bus bandwidth the transfer was given (0: no bytes)
  bool inter_node = false;
  double total_s() const { return latency_s + transfer_s; }
};
// op as the ledger names it ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast",
// "send", "recv", "send_recv", "barrier", "split"). Throws naming an unknown op.
RowTime row_time(const CollectiveRow& row, const GroupPlacement& group, const CommModelParams& params);

// The bus bandwidth a collective of `op` on `group` gets (GB/s), and whether it crosses nodes:
//   one node:                 intra_node
//   ring collectives across:  min(intra_node, min_ranks_per_node * inter_node)
//   point to point across:    inter_node when a neighbour is off the node, else intra_node
//   all-to-all across:        by parts (row_time): the share of peers off the node at inter_node
double effective_busbw_gbps(const std::string& op, const GroupPlacement& group, const CommModelParams& params,
                            bool* inter_node = nullptr);

}  // namespace quill::plan
