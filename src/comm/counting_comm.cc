#include "comm/counting_comm.h"

#include "base/error.h"

namespace quill {

CountingComm::CountingComm(Comm& inner, std::shared_ptr<CollectiveLedger> ledger)
    : inner_(&inner), ledger_(std::move(ledger)) {
  QUILL_CHECK(ledger_ != nullptr, "CountingComm '{}': no ledger", inner.name());
}

CountingComm::CountingComm(std::unique_ptr<Comm> inner, std::shared_ptr<CollectiveLedger> ledger)
    : owned_(std::move(inner)), inner_(owned_.get()), ledger_(std::move(ledger)) {
  QUILL_CHECK(inner_ != nullptr && ledger_ != nullptr, "CountingComm: no communicator or no ledger");
}

void CountingComm::count(const char* op, int64_t payload, int64_t sent, int64_t recv) const {
  ledger_->record(name(), size(), op, payload, sent, recv);
}

void CountingComm::count_reduce_scatter(const Tensor& in) const {
  const int64_t whole = static_cast<int64_t>(in.nbytes());
  const int64_t wire = ring_gather_bytes(whole, size());
  count("reduce_scatter", whole, wire, wire);
}

void CountingComm::count_all_gather(const Tensor& out) const {
  const int64_t whole = static_cast<int64_t>(out.nbytes());
  const int64_t wire = ring_gather_bytes(whole, size());
  count("all_gather", whole, wire, wire);
}

void CountingComm::count_all_to_all(const Tensor& in, const std::vector<int64_t>& send_counts,
                                    const std::vector<int64_t>& recv_counts) const {
  const int64_t elem = static_cast<int64_t>(dtype_size(in.dtype()));
  int64_t payload = 0, sent = 0, recv = 0;
  for (size_t r = 0; r < send_counts.size(); ++r) {
    payload += send_counts[r] * elem;
    if (static_cast<int>(r) != rank()) sent += send_counts[r] * elem;
  }
  for (size_t r = 0; r < recv_counts.size(); ++r)
    if (static_cast<int>(r) != rank()) recv += recv_counts[r] * elem;
  count("all_to_all", payload, sent, recv);
}

// Each operation is counted before it runs: a call that fails stops the job anyway.
void CountingComm::all_reduce(const Tensor& t, ReduceOp op) {
  const int64_t bytes = static_cast<int64_t>(t.nbytes()), wire = ring_all_reduce_bytes(bytes, size());
  count("all_reduce", bytes, wire, wire);
  inner_->all_reduce(t, op);
}

void CountingComm::reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) {
  count_reduce_scatter(in);
  inner_->reduce_scatter(in, out, op);
}

void CountingComm::all_gather(const Tensor& in, const Tensor& out) {
  count_all_gather(out);
  inner_->all_gather(in, out);
}

void CountingComm::all_to_all(const Tensor& in, const std::vector<int64_t>& send_counts, const Tensor& out,
                              const std::vector<int64_t>& recv_counts) {
  count_all_to_all(in, send_counts, recv_counts);
  inner_->all_to_all(in, send_counts, out, recv_counts);
}

// Root sends the tensor, every other rank receives it (the flat view; NCCL's ring broadcast
// forwards it along the ring, which its bus-bandwidth factor 1 accounts for).
void CountingComm::broadcast(const Tensor& t, int root) {
  const int64_t bytes = static_cast<int64_t>(t.nbytes());
  const bool me = root == rank();
  count("broadcast", bytes, me && size() > 1 ? bytes : 0, me ? 0 : bytes);
  inner_->broadcast(t, root);
}

void CountingComm::send(const Tensor& t, int peer) {
  count("send", static_cast<int64_t>(t.nbytes()), peer == rank() ? 0 : static_cast<int64_t>(t.nbytes()), 0);
  inner_->send(t, peer);
}

void CountingComm::recv(const Tensor& t, int peer) {
  count("recv", static_cast<int64_t>(t.nbytes()), 0, peer == rank() ? 0 : static_cast<int64_t>(t.nbytes()));
  inner_->recv(t, peer);
}

void CountingComm::send_recv(const Tensor& send, int dst, const Tensor& recv, int src) {
  const int64_t s = static_cast<int64_t>(send.nbytes()), r = static_cast<int64_t>(recv.nbytes());
  count("send_recv", s + r, dst == rank() ? 0 : s, src == rank() ? 0 : r);
  inner_->send_recv(send, dst, recv, src);
}

void CountingComm::barrier() {
  count("barrier", 0, 0, 0);
  inner_->barrier();
}

std::unique_ptr<CommHandle> CountingComm::start_reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) {
  count_reduce_scatter(in);
  return inner_->start_reduce_scatter(in, out, op);
}

std::unique_ptr<CommHandle> CountingComm::start_all_gather(const Tensor& in, const Tensor& out) {
  count_all_gather(out);
  return inner_->start_all_gather(in, out);
}

std::unique_ptr<CommHandle> CountingComm::start_all_to_all(const Tensor& in, const std::vector<int64_t>& send_counts,
                                                           const Tensor& out, const std::vector<int64_t>& recv_counts) {
  count_all_to_all(in, send_counts, recv_counts);
  return inner_->start_all_to_all(in, send_counts, out, recv_counts);
}

std::unique_ptr<Comm> CountingComm::split(const std::vector<int>& group, const std::string& name) {
  count("split", 0, 0, 0);
  return std::make_unique<CountingComm>(inner_->split(group, name), ledger_);
}

std::unique_ptr<Comm> CountingComm::split_isolated(const std::vector<int>& group, const std::string& name) {
  count("split", 0, 0, 0);
  return std::make_unique<CountingComm>(inner_->split_isolated(group, name), ledger_);
}

}  // namespace quill
