// TimedComm: a communicator that forwards every call to another (the loopback of a simulated rank) and
// gives it the time a communication model says the call takes, on a StandInClock (comm/standin_clock.h):
// blocking calls wait for their stand-in, started ones return its handle. The inner communicator's work
// (the loopback's copies, on the compute stream) completes before the stand-in's time starts, so what the
// run computes is the inner communicator's exactly. split() keeps the clock (NCCL's communicators of one
// context share its communication stream); split_isolated() takes an isolated clock, as the token exchange
// takes a stream of its own. Each communicator knows its members' world ranks, for the model's placement.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "comm/standin_clock.h"

namespace quill {

class TimedComm final : public Comm {
 public:
  // world_ranks: the members of `inner` in its rank order (the world: 0..size-1); world_rank: this rank's.
  TimedComm(std::unique_ptr<Comm> inner, std::vector<int> world_ranks, int world_rank,
            std::shared_ptr<const StandInTiming> timing, std::shared_ptr<StandInClock> clock);

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

 private:
  // The stand-in of one call of `op` moving `bytes`, queued on the clock.
  std::unique_ptr<CommHandle> stand_in(const char* op, const CallBytes& bytes);
  std::vector<int> members(const std::vector<int>& group) const;

  std::unique_ptr<Comm> inner_;
  std::vector<int> world_ranks_;
  int world_rank_;
  std::shared_ptr<const StandInTiming> timing_;
  std::shared_ptr<StandInClock> clock_;
};

}  // namespace quill
