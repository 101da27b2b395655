// What one collective call moves, by the conventions of the collective ledger (comm/collective_ledger.h):
// the payload (the operation's "size" as nccl-tests counts it) and the bytes this rank sends and receives
// on the wire under the ring algorithms. One definition for everything that reads a call's bytes: the
// ledger's counting (comm/counting_comm.h) and the timed stand-ins of a simulated rank (comm/timed_comm.h).
#pragma once

#include <cstdint>
#include <vector>

#include "tensor/tensor.h"

namespace quill {

struct CallBytes {
  int64_t payload = 0;
  int64_t sent = 0;
  int64_t recv = 0;
};

// p: the communicator's size; rank: this rank's index in it.
CallBytes all_reduce_bytes(const Tensor& t, int p);
CallBytes reduce_scatter_bytes(const Tensor& in, int p);   // in: the whole buffer
CallBytes all_gather_bytes(const Tensor& out, int p);      // out: the whole buffer
CallBytes all_to_all_bytes(const Tensor& in, const std::vector<int64_t>& send_counts,
                           const std::vector<int64_t>& recv_counts, int rank);
// Root sends the tensor, every other rank receives it (the flat view; NCCL's ring broadcast forwards it
// along the ring, which its bus-bandwidth factor 1 accounts for).
CallBytes broadcast_bytes(const Tensor& t, int root, int rank, int p);
CallBytes send_bytes(const Tensor& t, int peer, int rank);
CallBytes recv_bytes(const Tensor& t, int peer, int rank);
CallBytes send_recv_bytes(const Tensor& send, int dst, const Tensor& recv, int src, int rank);

}  // namespace quill
