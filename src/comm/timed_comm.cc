#include "comm/timed_comm.h"

#include <algorithm>

#include "base/error.h"

namespace quill {

TimedComm::TimedComm(std::unique_ptr<Comm> inner, std::vector<int> world_ranks, int world_rank,
                     std::shared_ptr<const StandInTiming> timing, std::shared_ptr<StandInClock> clock)
    : inner_(std::move(inner)),
      world_ranks_(std::move(world_ranks)),
      world_rank_(world_rank),
      timing_(std::move(timing)),
      clock_(std::move(clock)) {
  QUILL_CHECK(inner_ && timing_ && clock_, "TimedComm: no communicator, timing or clock");
  QUILL_CHECK(static_cast<int>(world_ranks_.size()) == inner_->size(),
              "TimedComm '{}': {} world ranks for a communicator of {}", inner_->name(), world_ranks_.size(),
              inner_->size());
}

std::unique_ptr<CommHandle> TimedComm::stand_in(const char* op, const CallBytes& bytes) {
  const StandInCall call{name(), op, size(), bytes, &world_ranks_, world_rank_};
  const double seconds = size() > 1 ? timing_->seconds(call) : 0.0;
  return clock_->occupy(seconds, CommSpanInfo{name(), op, size(), bytes.payload, std::max(bytes.sent, bytes.recv)});
}

void TimedComm::all_reduce(const Tensor& t, ReduceOp op) {
  inner_->all_reduce(t, op);
  stand_in("all_reduce", all_reduce_bytes(t, size()))->wait();
}

void TimedComm::reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) {
  inner_->reduce_scatter(in, out, op);
  stand_in("reduce_scatter", reduce_scatter_bytes(in, size()))->wait();
}

void TimedComm::all_gather(const Tensor& in, const Tensor& out) {
  inner_->all_gather(in, out);
  stand_in("all_gather", all_gather_bytes(out, size()))->wait();
}

void TimedComm::all_to_all(const Tensor& in, const std::vector<int64_t>& send_counts, const Tensor& out,
                           const std::vector<int64_t>& recv_counts) {
  inner_->all_to_all(in, send_counts, out, recv_counts);
  stand_in("all_to_all", all_to_all_bytes(in, send_counts, recv_counts, rank()))->wait();
}

void TimedComm::broadcast(const Tensor& t, int root) {
  inner_->broadcast(t, root);
  stand_in("broadcast", broadcast_bytes(t, root, rank(), size()))->wait();
}

void TimedComm::send(const Tensor& t, int peer) {
  inner_->send(t, peer);
  stand_in("send", send_bytes(t, peer, rank()))->wait();
}

void TimedComm::recv(const Tensor& t, int peer) {
  inner_->recv(t, peer);
  stand_in("recv", recv_bytes(t, peer, rank()))->wait();
}

void TimedComm::send_recv(const Tensor& send, int dst, const Tensor& recv, int src) {
  inner_->send_recv(send, dst, recv, src);
  stand_in("send_recv", send_recv_bytes(send, dst, recv, src, rank()))->wait();
}

void TimedComm::barrier() {
  inner_->barrier();
  stand_in("barrier", {})->wait();
}

// The inner communicator's started forms complete at once for the loopback (its copies are ordered on
// the compute stream); waiting on them here keeps that true for any inner communicator.
std::unique_ptr<CommHandle> TimedComm::start_reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) {
  inner_->start_reduce_scatter(in, out, op)->wait();
  return stand_in("reduce_scatter", reduce_scatter_bytes(in, size()));
}

std::unique_ptr<CommHandle> TimedComm::start_all_gather(const Tensor& in, const Tensor& out) {
  inner_->start_all_gather(in, out)->wait();
  return stand_in("all_gather", all_gather_bytes(out, size()));
}

std::unique_ptr<CommHandle> TimedComm::start_send_recv(const Tensor& send, int dst, const Tensor& recv, int src) {
  inner_->start_send_recv(send, dst, recv, src)->wait();
  return stand_in("send_recv", send_recv_bytes(send, dst, recv, src, rank()));
}

std::unique_ptr<CommHandle> TimedComm::start_all_to_all(const Tensor& in, const std::vector<int64_t>& send_counts,
                                                        const Tensor& out, const std::vector<int64_t>& recv_counts) {
  inner_->start_all_to_all(in, send_counts, out, recv_counts)->wait();
  return stand_in("all_to_all", all_to_all_bytes(in, send_counts, recv_counts, rank()));
}

std::vector<int> TimedComm::members(const std::vector<int>& group) const {
  std::vector<int> world;
  world.reserve(group.size());
  for (int r : group) {
    QUILL_CHECK(r >= 0 && r < size(), "TimedComm '{}': split group names rank {} of {}", name(), r, size());
    world.push_back(world_ranks_[static_cast<size_t>(r)]);
  }
  return world;
}

std::unique_ptr<Comm> TimedComm::split(const std::vector<int>& group, const std::string& name) {
  return std::make_unique<TimedComm>(inner_->split(group, name), members(group), world_rank_, timing_, clock_);
}

std::unique_ptr<Comm> TimedComm::split_isolated(const std::vector<int>& group, const std::string& name) {
  return std::make_unique<TimedComm>(inner_->split_isolated(group, name), members(group), world_rank_, timing_,
                                     clock_->isolated());
}

}  // namespace quill
