#include "comm/counting_comm.h"

#include "base/error.h"
#include "comm/call_bytes.h"

namespace quill {

CountingComm::CountingComm(Comm& inner, std::shared_ptr<CollectiveLedger> ledger)
    : inner_(&inner), ledger_(std::move(ledger)) {
  QUILL_CHECK(ledger_ != nullptr, "CountingComm '{}': no ledger", inner.name());
}

CountingComm::CountingComm(std::unique_ptr<Comm> inner, std::shared_ptr<CollectiveLedger> ledger)
    : owned_(std::move(inner)), inner_(owned_.get()), ledger_(std::move(ledger)) {
  QUILL_CHECK(inner_ != nullptr && ledger_ != nullptr, "CountingComm: no communicator or no ledger");
}

void CountingComm::count(const char* op, const CallBytes& b) const {
  ledger_->record(name(), size(), op, b.payload, b.sent, b.recv);
}

// Each operation is counted before it runs: a call that fails stops the job anyway.
void CountingComm::all_reduce(const Tensor& t, ReduceOp op) {
  count("all_reduce", all_reduce_bytes(t, size()));
  inner_->all_reduce(t, op);
}

void CountingComm::reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) {
  count("reduce_scatter", reduce_scatter_bytes(in, size()));
  inner_->reduce_scatter(in, out, op);
}

void CountingComm::all_gather(const Tensor& in, const Tensor& out) {
  count("all_gather", all_gather_bytes(out, size()));
  inner_->all_gather(in, out);
}

void CountingComm::all_to_all(const Tensor& in, const std::vector<int64_t>& send_counts, const Tensor& out,
                              const std::vector<int64_t>& recv_counts) {
  count("all_to_all", all_to_all_bytes(in, send_counts, recv_counts, rank()));
  inner_->all_to_all(in, send_counts, out, recv_counts);
}

void CountingComm::broadcast(const Tensor& t, int root) {
  count("broadcast", broadcast_bytes(t, root, rank(), size()));
  inner_->broadcast(t, root);
}

void CountingComm::send(const Tensor& t, int peer) {
  count("send", send_bytes(t, peer, rank()));
  inner_->send(t, peer);
}

void CountingComm::recv(const Tensor& t, int peer) {
  count("recv", recv_bytes(t, peer, rank()));
  inner_->recv(t, peer);
}

void CountingComm::send_recv(const Tensor& send, int dst, const Tensor& recv, int src) {
  count("send_recv", send_recv_bytes(send, dst, recv, src, rank()));
  inner_->send_recv(send, dst, recv, src);
}

void CountingComm::barrier() {
  count("barrier", {});
  inner_->barrier();
}

std::unique_ptr<CommHandle> CountingComm::start_reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) {
  count("reduce_scatter", reduce_scatter_bytes(in, size()));
  return inner_->start_reduce_scatter(in, out, op);
}

std::unique_ptr<CommHandle> CountingComm::start_all_gather(const Tensor& in, const Tensor& out) {
  count("all_gather", all_gather_bytes(out, size()));
  return inner_->start_all_gather(in, out);
}

std::unique_ptr<CommHandle> CountingComm::start_send_recv(const Tensor& send, int dst, const Tensor& recv, int src) {
  count("send_recv", send_recv_bytes(send, dst, recv, src, rank()));
  return inner_->start_send_recv(send, dst, recv, src);
}

std::unique_ptr<CommHandle> CountingComm::start_all_to_all(const Tensor& in, const std::vector<int64_t>& send_counts,
                                                           const Tensor& out, const std::vector<int64_t>& recv_counts) {
  count("all_to_all", all_to_all_bytes(in, send_counts, recv_counts, rank()));
  return inner_->start_all_to_all(in, send_counts, out, recv_counts);
}

std::unique_ptr<Comm> CountingComm::split(const std::vector<int>& group, const std::string& name) {
  count("split", {});
  return std::make_unique<CountingComm>(inner_->split(group, name), ledger_);
}

std::unique_ptr<Comm> CountingComm::split_isolated(const std::vector<int>& group, const std::string& name) {
  count("split", {});
  return std::make_unique<CountingComm>(inner_->split_isolated(group, name), ledger_);
}

}  // namespace quill
