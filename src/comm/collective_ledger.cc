#include "comm/collective_ledger.h"

namespace quill {

void CollectiveLedger::set_step(int64_t step) {
  std::lock_guard<std::mutex> lock(mu_);
  step_ = step;
  phase_ = step < 0 ? "outside" : "passes";
}

void CollectiveLedger::set_optimizer_phase() {
  std::lock_guard<std::mutex> lock(mu_);
  if (step_ >= 0) phase_ = "optimizer";
}

int64_t CollectiveLedger::step() const {
  std::lock_guard<std::mutex> lock(mu_);
  return step_;
}

void CollectiveLedger::record(const std::string& group, int group_size, const char* op, int64_t payload_bytes,
                              int64_t sent_bytes, int64_t recv_bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  CollectiveRow& row = rows_[{step_, phase_, group, op}];
  if (row.calls == 0) {
    row.step = step_;
    row.phase = phase_;
    row.group = group;
    row.group_size = group_size;
    row.op = op;
  }
  ++row.calls;
  row.payload_bytes += payload_bytes;
  row.sent_bytes += sent_bytes;
  row.recv_bytes += recv_bytes;
}

std::vector<CollectiveRow> CollectiveLedger::rows() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<CollectiveRow> out;
  out.reserve(rows_.size());
  for (const auto& [key, row] : rows_) out.push_back(row);
  return out;
}

void CollectiveLedger::add_loopback_seconds(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  loopback_s_[{step_, phase_}] += seconds;
}

std::vector<LoopbackTime> CollectiveLedger::loopback_times() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<LoopbackTime> out;
  for (const auto& [key, s] : loopback_s_) out.push_back({key.first, key.second, s});
  return out;
}

// A ring all-reduce is a reduce-scatter and an all-gather of p chunks: each rank sends (and
// receives) p - 1 chunks in each half. Chunks of a payload that p does not divide differ by one
// byte; the total over the ring is exact, this rank's share is rounded down.
int64_t ring_all_reduce_bytes(int64_t payload_bytes, int p) {
  return p <= 1 ? 0 : 2 * (p - 1) * payload_bytes / p;
}

int64_t ring_gather_bytes(int64_t whole_buffer_bytes, int p) { return p <= 1 ? 0 : (p - 1) * whole_buffer_bytes / p; }

}  // namespace quill
