#include "comm/call_bytes.h"

#include "comm/collective_ledger.h"

namespace quill {

namespace {
int64_t bytes_of(const Tensor& t) { return static_cast<int64_t>(t.nbytes()); }
}  // namespace

CallBytes all_reduce_bytes(const Tensor& t, int p) {
  const int64_t wire = ring_all_reduce_bytes(bytes_of(t), p);
  return {bytes_of(t), wire, wire};
}

CallBytes reduce_scatter_bytes(const Tensor& in, int p) {
  const int64_t wire = ring_gather_bytes(bytes_of(in), p);
  return {bytes_of(in), wire, wire};
}

CallBytes all_gather_bytes(const Tensor& out, int p) {
  const int64_t wire = ring_gather_bytes(bytes_of(out), p);
  return {bytes_of(out), wire, wire};
}

CallBytes all_to_all_bytes(const Tensor& in, const std::vector<int64_t>& send_counts,
                           const std::vector<int64_t>& recv_counts, int rank) {
  const int64_t elem = static_cast<int64_t>(dtype_size(in.dtype()));
  CallBytes b;
  for (size_t r = 0; r < send_counts.size(); ++r) {
    b.payload += send_counts[r] * elem;
    if (static_cast<int>(r) != rank) b.sent += send_counts[r] * elem;
  }
  for (size_t r = 0; r < recv_counts.size(); ++r)
    if (static_cast<int>(r) != rank) b.recv += recv_counts[r] * elem;
  return b;
}

CallBytes broadcast_bytes(const Tensor& t, int root, int rank, int p) {
  const bool me = root == rank;
  return {bytes_of(t), me && p > 1 ? bytes_of(t) : 0, me ? 0 : bytes_of(t)};
}

CallBytes send_bytes(const Tensor& t, int peer, int rank) { return {bytes_of(t), peer == rank ? 0 : bytes_of(t), 0}; }

CallBytes recv_bytes(const Tensor& t, int peer, int rank) { return {bytes_of(t), 0, peer == rank ? 0 : bytes_of(t)}; }

CallBytes send_recv_bytes(const Tensor& send, int dst, const Tensor& recv, int src, int rank) {
  return {bytes_of(send) + bytes_of(recv), dst == rank ? 0 : bytes_of(send), src == rank ? 0 : bytes_of(recv)};
}

}  // namespace quill
