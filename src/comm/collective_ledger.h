// CollectiveLedger: the bytes every collective of one rank moved, per training step, group and
// operation, as a table a communication model can read (docs/simulate-rank.md). CountingComm
// (comm/counting_comm.h) records into it, around a real communicator or the loopback one, so that
// a real run and a simulated rank are counted by the same code.
//
// Per call it records the payload (the size NCCL's performance notes call the operation's "size":
// the all-reduced tensor, the whole gathered / reduce-scattered buffer, the all-to-all's send
// total) and the bytes this rank sends and receives on the wire under the ring algorithms that
// NCCL's bus-bandwidth factors describe (nccl-tests doc/PERFORMANCE.md): all-reduce 2(p-1)/p of
// the payload each way, all-gather and reduce-scatter (p-1)/p, all-to-all what goes to and comes
// from other ranks, point to point what the message holds. A rank's copy to itself is no traffic.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace quill {

// One row of the table: every call of `op` on the group `group` during `phase` of `step` (-1: outside
// the training steps: set-up, argument agreement, the closing exchange of peaks).
struct CollectiveRow {
  int64_t step = -1;
  std::string group;    // the communicator's name: "world", "tp", "dp", "pp", "dp-cp", ...
  int group_size = 1;
  std::string op;       // "all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast",
                        // "send", "recv", "send_recv", "barrier", "split"
  int64_t calls = 0;
  int64_t payload_bytes = 0;
  int64_t sent_bytes = 0;   // by this rank, over the wire
  int64_t recv_bytes = 0;   // by this rank, over the wire
  // "passes": the step's forward and backward passes (tensor, sequence and expert parallelism, the
  // pipeline's exchanges); "optimizer": the rest of the step (loss and count sums, gradient reduction,
  // norm, weight all-gather); "outside" at step -1. A communication model places each on the timeline.
  std::string phase = "outside";

  bool operator==(const CollectiveRow&) const = default;
};

// A simulated rank's loopback copies in one phase of one step (CollectiveLedger::add_loopback_seconds).
struct LoopbackTime {
  int64_t step = -1;
  std::string phase = "outside";
  double seconds = 0;
};

class CollectiveLedger {
 public:
  // The step that later calls belong to (-1: none), in its passes; set_optimizer_phase moves the step's
  // later calls to its "optimizer" phase. Set by the trainer's step probe.
  void set_step(int64_t step);
  void set_optimizer_phase();
  int64_t step() const;
  void record(const std::string& group, int group_size, const char* op, int64_t payload_bytes, int64_t sent_bytes,
              int64_t recv_bytes);
  // Sorted by step, then phase, group and op as strings (byte order: "optimizer" before "passes").
  std::vector<CollectiveRow> rows() const;

  // A simulated rank's loopback (comm/loopback_comm.h: LoopbackMover::take_span_seconds): seconds its
  // stand-in copies took, added to the present step and phase.
  void add_loopback_seconds(double seconds);
  // Per (step, phase) as above, sorted the same way; empty for a real run.
  std::vector<LoopbackTime> loopback_times() const;

 private:
  mutable std::mutex mu_;
  int64_t step_ = -1;
  std::string phase_ = "outside";
  std::map<std::tuple<int64_t, std::string, std::string, std::string>, CollectiveRow> rows_;
  std::map<std::pair<int64_t, std::string>, double> loopback_s_;
};

// Wire bytes of the ring algorithms (see the header comment), for a group of p ranks.
int64_t ring_all_reduce_bytes(int64_t payload_bytes, int p);
int64_t ring_gather_bytes(int64_t whole_buffer_bytes, int p);  // all-gather and reduce-scatter

}  // namespace quill
