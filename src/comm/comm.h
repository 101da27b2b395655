// Comm: the one collective interface every parallel feature talks to (architecture.md). An NCCL
// implementation serves GPU tensors (comm/nccl/nccl_comm.h), an MPI one CPU tensors
// (comm/mpi_comm.h). This header is a pure interface: no MPI, no CUDA.
//
// Conventions shared by every implementation:
// - Tensors are contiguous; counts are in elements of the tensor's dtype. Supported dtypes:
//   F32, F64, BF16, F16, I32, I64, U8 (reductions too; BF16/F16 are reduced in fp32 on CPU);
//   Bool for data movement only. Every tensor must live on `device()`.
// - Ranks are this communicator's ranks, 0..size()-1.
// - Collectives are called by every rank of the communicator in the same order with matching
//   arguments. CPU operations have completed on return; GPU operations are ordered after the
//   caller's (compute) stream's earlier work and before its later work, and may run on a stream of
//   their own (NCCL does); the start_* forms leave the second ordering to CommHandle::wait.
// - A failure (a peer that never arrives within the timeout, an engine error, arguments that
//   differ across ranks) stops every rank with a message naming the rank, the communicator and
//   the operation (and for a timeout the training step, when CommOptions::step_mark is set);
//   nothing hangs silently. Communicators split from one inherit its options. See CommOptions.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/step_mark.h"
#include "tensor/tensor.h"

namespace quill {

enum class ReduceOp { Sum, Max };

// A started operation (Comm::start_*). wait() orders the caller after it: on a GPU the caller's
// stream waits for it (the host does not block); a CPU operation is complete when started. The
// tensors it reads and writes must stay alive and untouched until wait() returns.
class CommHandle {
 public:
  virtual ~CommHandle() = default;
  virtual void wait() = 0;
};

// The handle of an operation that completed when it started.
class CompletedCommHandle final : public CommHandle {
 public:
  void wait() override {}
};

struct CommOptions {
  // A collective that has not completed after this long stops the job (every rank) with a message.
  double timeout_s = 600;
  // Before each collective, check that every rank passed matching arguments (op, dtype, counts,
  // root). Costs one small extra collective; the MPI implementation honours it, NCCL does not.
  bool check_args = true;
  // What a failure that every rank of the communicator detects alike (mismatched or invalid
  // arguments) does: Abort prints the message and ends the whole job; Throw throws quill::Error
  // on every rank (for tests). A failure of one rank alone (an engine error, a timeout, a
  // truncated message) always aborts, since its peers are in an unknown state.
  enum class OnError { Abort, Throw } on_error = OnError::Abort;
  // The job's training step (comm/step_mark.h), named by the message of a collective that times
  // out; null: no step is named. Splits share it.
  std::shared_ptr<const StepMark> step_mark;
};

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual Device device() const = 0;
  virtual const std::string& name() const = 0;  // "world", "dp", ... (in messages)

  // In place: every rank ends with the element-wise reduction over ranks.
  virtual void all_reduce(const Tensor& t, ReduceOp op) = 0;
  // in holds size() equal blocks of out.numel() elements; rank r receives the reduction of
  // block r. out may be in's own block r (in place); no other overlap.
  virtual void reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) = 0;
  // out receives size() blocks of in.numel() elements, block r from rank r. in may be out's
  // own block rank() (in place); no other overlap.
  virtual void all_gather(const Tensor& in, const Tensor& out) = 0;
  // All-to-all with per-rank counts (all-to-all-v): in holds, back to back in rank order,
  // send_counts[r] elements for rank r; out receives back to back recv_counts[r] elements from
  // rank r. Rank a's send_counts[b] must equal rank b's recv_counts[a]. The counts may sum to
  // less than a tensor's numel (a buffer of some capacity); in and out must not overlap.
  virtual void all_to_all(const Tensor& in, const std::vector<int64_t>& send_counts, const Tensor& out,
                          const std::vector<int64_t>& recv_counts) = 0;
  // From root's t to every rank's t.
  virtual void broadcast(const Tensor& t, int root) = 0;
  // Point to point: the receiver's tensor has the sender's numel and dtype. send and recv each
  // wait for their partner, so pair them in a deadlock-free order; send_recv does both at once
  // (a ring shift, a pipeline exchange) and is always safe.
  virtual void send(const Tensor& t, int peer) = 0;
  virtual void recv(const Tensor& t, int peer) = 0;
  virtual void send_recv(const Tensor& send, int dst, const Tensor& recv, int src) = 0;
  virtual void barrier() = 0;

  // Started forms of the operations a training step overlaps with compute (the gradient
  // reduce-scatter, the weights' all-gather, the token all-to-all): they return once the operation
  // is enqueued, and handle->wait() orders what follows after it. By default they run the plain
  // form and return a completed handle; NCCL enqueues them on its own stream.
  virtual std::unique_ptr<CommHandle> start_reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) {
    reduce_scatter(in, out, op);
    return std::make_unique<CompletedCommHandle>();
  }
  virtual std::unique_ptr<CommHandle> start_all_gather(const Tensor& in, const Tensor& out) {
    all_gather(in, out);
    return std::make_unique<CompletedCommHandle>();
  }
  virtual std::unique_ptr<CommHandle> start_all_to_all(const Tensor& in, const std::vector<int64_t>& send_counts,
                                                       const Tensor& out, const std::vector<int64_t>& recv_counts) {
    all_to_all(in, send_counts, out, recv_counts);
    return std::make_unique<CompletedCommHandle>();
  }
  // send_recv started (a ring step of --tp-comm-overlap's all-gather pipelined with its GEMMs).
  virtual std::unique_ptr<CommHandle> start_send_recv(const Tensor& send, int dst, const Tensor& recv, int src) {
    send_recv(send, dst, recv, src);
    return std::make_unique<CompletedCommHandle>();
  }

  // A sub-communicator; collective over this communicator. Every rank passes the group it
  // belongs to (ranks of this communicator; the groups of all ranks partition them, as the
  // groups of one kind of a Grid do); the new communicator numbers its ranks in list order.
  virtual std::unique_ptr<Comm> split(const std::vector<int>& group, const std::string& name) = 0;
  // split(), but the new communicator's operations queue apart from every other communicator's: an
  // engine communicator of its own and, on a GPU, a communication stream of its own (ordered against
  // the caller's stream by events, as every operation is). For an exchange that must never wait
  // behind another group's collectives nor be waited behind: the experts' token all-to-all against
  // the gradients' reduce-scatter (docs/decisions/expert-exchange-stream.md). By default split(),
  // which suits communicators whose operations share no queue (MPI: every split is a communicator
  // of its own whose nonblocking operations progress independently of the others').
  virtual std::unique_ptr<Comm> split_isolated(const std::vector<int>& group, const std::string& name) {
    return split(group, name);
  }
};

}  // namespace quill
