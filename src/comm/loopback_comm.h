// LoopbackComm: a communicator of a given size and rank with no peers, so that one process runs
// exactly one rank's share of a large layout (`quill train --simulate-rank R`, docs/simulate-rank.md).
// Every collective returns correctly sized, deterministic data built from this rank's own inputs,
// as if every other rank of the group were a copy of this one:
//
// - all_reduce leaves the tensor as it is (Sum and Max): the *mean* of `size` equal contributions
//   rather than their sum, so that values keep one rank's scale (a sum would grow the TP partial
//   sums and the gradients by the group size at every reduction);
// - reduce_scatter writes this rank's block of the input (the same mean rule);
// - all_gather replicates the input into every block; in place (the input is the output's own block,
//   as ZeRO-1's weight gather is) the other blocks keep what they hold: the peers' shards as they were
//   (for weights, their values before the step), never copies of this rank's; broadcast leaves the
//   tensor as it is;
// - all_to_all delivers from source q the block this rank sends to rank (2·rank − q) mod size:
//   what q would send here if every rank routed as this one, shifted by q − rank. Received totals
//   equal sent totals, and a count exchange followed by the data exchange agrees with itself;
//   where recv_counts ask for more than that block holds, the rest is the fill pattern;
// - send does nothing; recv fills the tensor with the fill pattern (values in [-0.5, 0.5) for
//   floating dtypes, zeros for integers: a random-looking activation or gradient, so that routers
//   downstream spread tokens as over real data); send_recv copies what is sent into the received
//   tensor when the sizes agree (the copy's neighbour sends the same), else the pattern;
// - barrier does nothing; split returns a loopback of the group's size, this rank's index in it;
// - with a routing model (set_routing, docs/simulate-rank.md), the communicator named "ep" answers the
//   expert dispatcher's count exchange (an I64 all_to_all of equal counts per peer) with the model's
//   counts instead of the rule above: the rows every peer would route to this rank's experts. The data
//   exchanges that follow then move those counts of rows (the rule above, the pattern beyond a block).
//
// Bytes are not counted here: wrap it in a CountingComm (comm/counting_comm.h), as real runs are.
// Argument checks are those of the real communicators (comm/comm_checks.h); a bad call throws.
// Device memory is reached through a LoopbackMover: the host one here, a CUDA one in comm/cuda.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/comm.h"

namespace quill {

// How a loopback communicator touches its tensors' memory (all of them on device()).
class LoopbackMover {
 public:
  virtual ~LoopbackMover() = default;
  virtual Device device() const = 0;
  // `bytes` bytes from src at src_offset to dst at dst_offset (byte offsets; no overlap).
  virtual void copy(const Tensor& dst, size_t dst_offset, const Tensor& src, size_t src_offset, size_t bytes) = 0;
  // Elements [first, first + count) of dst get the fill pattern of dst's dtype (loopback_pattern).
  virtual void fill(const Tensor& dst, int64_t first, int64_t count) = 0;
  // The first `bytes` bytes of src into host memory, and host memory into dst (complete on return).
  virtual void to_host(void* dst, const Tensor& src, size_t bytes) = 0;
  virtual void from_host(const Tensor& dst, const void* src, size_t bytes) = 0;

  // The loopback's own time. Each collective that moves data runs between begin_span() and end_span()
  // (nested spans count once); take_span_seconds() returns the spans' time since its last call, after
  // waiting for the last span to finish: the host clock around the host mover's copies, events around
  // the CUDA mover's on its stream. These copies stand in for the communication a projection models
  // apart, so it takes them off the measured compute (docs/comm-model.md).
  virtual void begin_span() = 0;
  virtual void end_span() = 0;
  virtual double take_span_seconds() = 0;
};

// The routing model of a simulated rank's token exchange (comm/loopback_routing.h): what the other
// ranks of its expert-parallel group send to its experts.
class LoopbackRouting {
 public:
  virtual ~LoopbackRouting() = default;
  // The dispatcher's count exchange: `sent` holds this rank's rows per expert (all E experts, expert
  // order), `rank` its index in the group of `size` (E divisible by size). Returns the counts received,
  // source-major: [source][local expert], E values; from itself, its own counts for its own experts.
  virtual std::vector<int64_t> received(const std::vector<int64_t>& sent, int rank, int size) = 0;
};

// The fill pattern on the host: `count` elements of `dtype`, element i a hash of i mapped to
// [-0.5, 0.5) for F32/F64/BF16/F16, 0 for integer and Bool dtypes.
Tensor loopback_pattern(DType dtype, int64_t count);

// The host mover: memcpy, and the pattern from a cache that grows to the largest fill asked for.
std::unique_ptr<LoopbackMover> make_host_loopback_mover();

class LoopbackComm final : public Comm {
 public:
  LoopbackComm(int size, int rank, std::string name, std::shared_ptr<LoopbackMover> mover);

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Device device() const override { return mover_->device(); }
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
  void barrier() override {}
  std::unique_ptr<Comm> split(const std::vector<int>& group, const std::string& name) override;

  // The routing model of the "ep" communicator, inherited by every split (null: the block rule).
  void set_routing(std::shared_ptr<LoopbackRouting> routing) { routing_ = std::move(routing); }

  // The source block rule of all_to_all: the block of this rank's input delivered as from `source`.
  int all_to_all_block_from(int source) const;

 private:
  void check(const std::string& problem) const;  // throws naming the communicator, unless ""
  void check_tensor(const Tensor& t, const char* op, const char* role) const;

  int size_, rank_;
  std::string name_;
  std::shared_ptr<LoopbackMover> mover_;
  std::shared_ptr<LoopbackRouting> routing_;
};

}  // namespace quill
