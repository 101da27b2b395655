#include "comm/loopback_comm.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>

#include "base/error.h"
#include "comm/comm_checks.h"

namespace quill {

namespace {

// splitmix64's finaliser (Steele, Lea, Flood 2014): a cheap hash whose top bits are well mixed.
uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

bool floating(DType d) { return d == DType::F32 || d == DType::F64 || d == DType::BF16 || d == DType::F16; }

char* bytes_of(const Tensor& t) { return static_cast<char*>(t.data()); }

class HostMover final : public LoopbackMover {
 public:
  Device device() const override { return Device::CPU; }
  void copy(const Tensor& dst, size_t dst_offset, const Tensor& src, size_t src_offset, size_t bytes) override {
    if (bytes) std::memmove(bytes_of(dst) + dst_offset, bytes_of(src) + src_offset, bytes);
  }
  void to_host(void* dst, const Tensor& src, size_t bytes) override {
    if (bytes) std::memcpy(dst, src.data(), bytes);
  }
  void from_host(const Tensor& dst, const void* src, size_t bytes) override {
    if (bytes) std::memcpy(dst.data(), src, bytes);
  }
  void fill(const Tensor& dst, int64_t first, int64_t count) override {
    if (count <= 0) return;
    const Tensor pattern = cached(dst.dtype(), count);
    const size_t elem = dtype_size(dst.dtype());
    std::memcpy(bytes_of(dst) + static_cast<size_t>(first) * elem, pattern.data(), static_cast<size_t>(count) * elem);
  }
  // The copies above are done on return: the host clock around them is their time.
  void begin_span() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (depth_++ == 0) span_start_ = std::chrono::steady_clock::now();
  }
  void end_span() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (--depth_ == 0) seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - span_start_).count();
  }
  double take_span_seconds() override {
    std::lock_guard<std::mutex> lock(mu_);
    return std::exchange(seconds_, 0.0);
  }

 private:
  Tensor cached(DType dtype, int64_t count) {
    std::lock_guard<std::mutex> lock(mu_);
    Tensor& t = patterns_[dtype];
    if (!t.defined() || t.numel() < count) t = loopback_pattern(dtype, count);
    return t;
  }
  std::mutex mu_;
  std::map<DType, Tensor> patterns_;
  int depth_ = 0;
  std::chrono::steady_clock::time_point span_start_;
  double seconds_ = 0;
};

// One collective's data movement as a span of the mover's time (LoopbackMover::begin_span).
class Span {
 public:
  explicit Span(LoopbackMover& mover) : mover_(mover) { mover_.begin_span(); }
  ~Span() { mover_.end_span(); }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

 private:
  LoopbackMover& mover_;
};

}  // namespace

Tensor loopback_pattern(DType dtype, int64_t count) {
  if (!floating(dtype)) return Tensor::zeros({count}, dtype);
  Tensor f = Tensor::empty({count}, DType::F32);
  float* v = f.data_as<float>();
  for (int64_t i = 0; i < count; ++i)
    v[i] = static_cast<float>(mix(static_cast<uint64_t>(i)) >> 40) * (1.0f / 16777216.0f) - 0.5f;  // top 24 bits
  return dtype == DType::F32 ? f : convert_dtype(f, dtype);
}

std::unique_ptr<LoopbackMover> make_host_loopback_mover() { return std::make_unique<HostMover>(); }

LoopbackComm::LoopbackComm(int size, int rank, std::string name, std::shared_ptr<LoopbackMover> mover)
    : size_(size), rank_(rank), name_(std::move(name)), mover_(std::move(mover)) {
  QUILL_CHECK(mover_ != nullptr, "loopback comm '{}': no mover", name_);
  QUILL_CHECK(size_ >= 1 && rank_ >= 0 && rank_ < size_, "loopback comm '{}': rank {} is outside 0..{}", name_, rank_,
              size_ - 1);
}

void LoopbackComm::check(const std::string& problem) const {
  if (!problem.empty()) QUILL_FAIL("loopback comm '{}' (rank {} of {}): {}", name_, rank_, size_, problem);
}

void LoopbackComm::check_tensor(const Tensor& t, const char* op, const char* role) const {
  check(comm_checks::tensor(t, device(), op, role));
}

void LoopbackComm::all_reduce(const Tensor& t, ReduceOp) {
  check_tensor(t, "all_reduce", "");
  check(comm_checks::reducible(t, "all_reduce"));
}

void LoopbackComm::reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp) {
  check_tensor(in, "reduce_scatter", "input");
  check_tensor(out, "reduce_scatter", "output");
  bool in_place = false;
  check(comm_checks::reduce_scatter(in, out, size_, rank_, &in_place));
  if (in_place) return;
  const Span span(*mover_);
  mover_->copy(out, 0, in, static_cast<size_t>(rank_) * out.nbytes(), out.nbytes());
}

void LoopbackComm::all_gather(const Tensor& in, const Tensor& out) {
  check_tensor(in, "all_gather", "input");
  check_tensor(out, "all_gather", "output");
  bool in_place = false;
  check(comm_checks::all_gather(in, out, size_, rank_, &in_place));
  // In place (the ZeRO-1 weights' gather), the other blocks keep what they hold: the peers' shards as
  // the last exchange left them (for weights, their initial values), not copies of this rank's shard,
  // so the model the next step runs keeps its real values outside this rank's shard.
  if (in_place) return;
  const Span span(*mover_);
  const size_t block = in.nbytes();
  for (int r = 0; r < size_; ++r) mover_->copy(out, static_cast<size_t>(r) * block, in, 0, block);
}

int LoopbackComm::all_to_all_block_from(int source) const { return ((2 * rank_ - source) % size_ + size_) % size_; }

void LoopbackComm::all_to_all(const Tensor& in, const std::vector<int64_t>& send_counts, const Tensor& out,
                              const std::vector<int64_t>& recv_counts) {
  check_tensor(in, "all_to_all", "input");
  check_tensor(out, "all_to_all", "output");
  check(comm_checks::all_to_all(in, send_counts, out, recv_counts, size_, name_));
  const Span span(*mover_);
  if (routing_ && name_ == "ep" && in.dtype() == DType::I64 && size_ > 1) {
    const int64_t per = send_counts[0];
    bool counts_exchange = true;
    for (int r = 0; r < size_; ++r) counts_exchange &= send_counts[r] == per && recv_counts[r] == per;
    if (counts_exchange) {
      const size_t n = static_cast<size_t>(per * size_);
      std::vector<int64_t> sent(n);
      mover_->to_host(sent.data(), in, n * sizeof(int64_t));
      const std::vector<int64_t> got = routing_->received(sent, rank_, size_);
      check(got.size() == n ? "" : "the routing model returned the wrong number of counts");
      mover_->from_host(out, got.data(), n * sizeof(int64_t));
      return;
    }
  }
  std::vector<int64_t> send_offset(static_cast<size_t>(size_), 0);
  for (int r = 1; r < size_; ++r) send_offset[r] = send_offset[r - 1] + send_counts[r - 1];
  const size_t elem = dtype_size(in.dtype());
  int64_t at = 0;
  for (int q = 0; q < size_; ++q) {
    const int j = all_to_all_block_from(q);
    const int64_t n = std::min(recv_counts[q], send_counts[j]);
    mover_->copy(out, static_cast<size_t>(at) * elem, in, static_cast<size_t>(send_offset[j]) * elem,
                 static_cast<size_t>(n) * elem);
    mover_->fill(out, at + n, recv_counts[q] - n);
    at += recv_counts[q];
  }
}

void LoopbackComm::broadcast(const Tensor& t, int root) {
  check_tensor(t, "broadcast", "");
  check(comm_checks::peer(root, size_, name_, "broadcast"));
}

void LoopbackComm::send(const Tensor& t, int peer) {
  check_tensor(t, "send", "");
  check(comm_checks::peer(peer, size_, name_, "send"));
}

void LoopbackComm::recv(const Tensor& t, int peer) {
  check_tensor(t, "recv", "");
  check(comm_checks::peer(peer, size_, name_, "recv"));
  const Span span(*mover_);
  mover_->fill(t, 0, t.numel());
}

void LoopbackComm::send_recv(const Tensor& send, int dst, const Tensor& recv, int src) {
  check_tensor(send, "send_recv", "send");
  check_tensor(recv, "send_recv", "receive");
  check(comm_checks::peer(dst, size_, name_, "send_recv"));
  check(comm_checks::peer(src, size_, name_, "send_recv"));
  if (comm_checks::overlaps(send, recv)) check("send_recv: send and receive tensors overlap");
  const Span span(*mover_);
  if (send.nbytes() == recv.nbytes() && send.dtype() == recv.dtype()) mover_->copy(recv, 0, send, 0, recv.nbytes());
  else mover_->fill(recv, 0, recv.numel());
}

std::unique_ptr<Comm> LoopbackComm::split(const std::vector<int>& group, const std::string& name) {
  check(comm_checks::split(group, rank_, size_, name_, name));
  const int index = static_cast<int>(std::find(group.begin(), group.end(), rank_) - group.begin());
  auto sub = std::make_unique<LoopbackComm>(static_cast<int>(group.size()), index, name, mover_);
  sub->set_routing(routing_);
  return sub;
}

}  // namespace quill
