// CountingComm: a Comm that forwards every call to another communicator and records what the call
// moves into a CollectiveLedger (comm/collective_ledger.h: per step, group and operation; the
// byte conventions are there). Its split() wraps the sub-communicator alike, into the same
// ledger, so wrapping a run's world counts every group of its Layout. It adds no traffic; the
// argument checks some communicators make (MpiComm's check_args) are not counted, being no part
// of the operation.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/call_bytes.h"
#include "comm/collective_ledger.h"
#include "comm/comm.h"

namespace quill {

class CountingComm final : public Comm {
 public:
  // Over a communicator someone else owns (a Distributed's world), or one this object owns.
  CountingComm(Comm& inner, std::shared_ptr<CollectiveLedger> ledger);
  CountingComm(std::unique_ptr<Comm> inner, std::shared_ptr<CollectiveLedger> ledger);

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  Device device() const override { return inner_->device(); }
  const std::string& name() const override { return inner_->name(); }

  void all_reduce(const Tensor& t, ReduceOp op) override;
  void reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) override;
  void all_gather(const Tensor& in, const Tensor& out) override;
  void all_to_all(const Tensor& in, const std::vector<int64_t>& send_counts, const Tensor& out,
                  const std::vector<int64_t>& recv_counts) override;
  void broadcast(const Tensor& t, int root) override;
  void send(const Tensor& t, int peer) override;
  void recv(const Tensor& t, int peer) override;
  void send_recv(const Tensor& send, int dst, const Tensor& recv, int src) override;
  void barrier() override;
  std::unique_ptr<CommHandle> start_reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) override;
  std::unique_ptr<CommHandle> start_all_gather(const Tensor& in, const Tensor& out) override;
  std::unique_ptr<CommHandle> start_send_recv(const Tensor& send, int dst, const Tensor& recv, int src) override;
  std::unique_ptr<CommHandle> start_all_to_all(const Tensor& in, const std::vector<int64_t>& send_counts,
                                               const Tensor& out, const std::vector<int64_t>& recv_counts) override;
  std::unique_ptr<Comm> split(const std::vector<int>& group, const std::string& name) override;
  std::unique_ptr<Comm> split_isolated(const std::vector<int>& group, const std::string& name) override;

  const std::shared_ptr<CollectiveLedger>& ledger() const { return ledger_; }

 private:
  void count(const char* op, const CallBytes& bytes) const;

  std::unique_ptr<Comm> owned_;
  Comm* inner_;
  std::shared_ptr<CollectiveLedger> ledger_;
};

}  // namespace quill
