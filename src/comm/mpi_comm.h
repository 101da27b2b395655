// MpiComm: the Comm interface over MPI, for CPU tensors (the CPU backend's parallel runs and every
// parallel test under mpirun). Each collective runs as its nonblocking MPI variant and is waited
// for with a deadline, so a peer that never arrives ends the job with a message instead of a
// hang. The communicator's error handler is MPI_ERRORS_RETURN; every return code is checked.
//
// The started forms (start_reduce_scatter, start_all_gather, start_all_to_all) post the nonblocking
// operation and return; the handle's wait() completes it under the same deadline. MPI progresses the
// operations of different communicators independently, so operations started on two communicators
// complete whatever order the ranks started them in (the experts' exchange against the gradients'
// reduce-scatter). The started forms check their arguments locally only: the cross-rank agreement
// of check_args is itself a collective, and waiting for it would make the start wait for every peer,
// which is what the started forms exist to avoid.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "comm/comm.h"

namespace quill {

class MpiComm final : public Comm {
 public:
  // Wraps a duplicate of `comm` (so our error handler and traffic stay ours). MPI must be
  // initialised (init_distributed does it) and stay so until this object is gone.
  explicit MpiComm(MPI_Comm comm = MPI_COMM_WORLD, std::string name = "world", CommOptions options = {});
  ~MpiComm() override;
  MpiComm(const MpiComm&) = delete;
  MpiComm& operator=(const MpiComm&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Device device() const override { return Device::CPU; }
  const std::string& name() const override { return name_; }

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
  std::unique_ptr<Comm> split(const std::vector<int>& group, const std::string& name) override;
  std::unique_ptr<CommHandle> start_reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) override;
  std::unique_ptr<CommHandle> start_all_gather(const Tensor& in, const Tensor& out) override;
  std::unique_ptr<CommHandle> start_send_recv(const Tensor& send, int dst, const Tensor& recv, int src) override;
  std::unique_ptr<CommHandle> start_all_to_all(const Tensor& in, const std::vector<int64_t>& send_counts,
                                               const Tensor& out, const std::vector<int64_t>& recv_counts) override;

  MPI_Comm handle() const { return comm_; }
  const CommOptions& options() const { return options_; }

  // Prints "quill: <message>" to stderr (unless empty) and ends every rank of the job: MPI_Abort
  // when MPI is up, else _Exit(1).
  [[noreturn]] static void abort_job(const std::string& message);

 private:
  struct Signature;
  class Started;  // a started operation's handle
  std::string who() const;  // "rank 3 (rank 1 of 2 in comm 'tp')"
  [[noreturn]] void fail(const std::string& message) const;  // a failure every rank detects: policy
  void check_rc(int rc, const std::string& what) const;      // an MPI error: abort
  void wait(MPI_Request* request, const std::string& what, MPI_Status* status = nullptr) const;
  void agree(const Signature& mine) const;  // every rank passed the same signature, or fail()
  void check(const std::string& problem) const;  // fail() unless problem is ""
  void check_tensor(const Tensor& t, const char* op, const char* role) const;
  void check_peer(int peer, const char* op) const;
  // Local checks, then the nonblocking operation posted (the plain forms agree across ranks between).
  void check_reduce_scatter(const Tensor& in, const Tensor& out, bool* in_place) const;
  void check_all_gather(const Tensor& in, const Tensor& out, bool* in_place) const;
  void check_send_recv(const Tensor& send, int dst, const Tensor& recv, int src) const;
  void check_all_to_all(const Tensor& in, const std::vector<int64_t>& send_counts, const Tensor& out,
                        const std::vector<int64_t>& recv_counts) const;
  std::unique_ptr<Started> post_reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op, bool in_place) const;
  std::unique_ptr<Started> post_all_gather(const Tensor& in, const Tensor& out, bool in_place) const;
  std::unique_ptr<Started> post_all_to_all(const Tensor& in, const std::vector<int64_t>& send_counts, const Tensor& out,
                                           const std::vector<int64_t>& recv_counts) const;

  MPI_Comm comm_ = MPI_COMM_NULL;
  std::string name_;
  CommOptions options_;
  int rank_ = 0, size_ = 1, world_rank_ = 0;
};

}  // namespace quill
