#include "comm/cuda/loopback_cuda_mover.h"

#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <vector>

#include "base/error.h"

namespace quill {

namespace {

void check(cudaError_t e, const char* what) {
  QUILL_CHECK(e == cudaSuccess, "loopback comm (CUDA): {} failed: {}", what, cudaGetErrorString(e));
}

class CudaMover final : public LoopbackMover {
 public:
  explicit CudaMover(cudaStream_t stream) : stream_(stream) {}
  ~CudaMover() override {
    cudaStreamSynchronize(stream_);  // fills may still read the patterns
    for (auto& [dtype, p] : patterns_) cudaFree(p.data);
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
  }

  Device device() const override { return Device::CUDA; }

  void copy(const Tensor& dst, size_t dst_offset, const Tensor& src, size_t src_offset, size_t bytes) override {
    if (!bytes) return;
    check(cudaMemcpyAsync(static_cast<char*>(dst.data()) + dst_offset, static_cast<const char*>(src.data()) + src_offset,
                          bytes, cudaMemcpyDeviceToDevice, stream_),
          "cudaMemcpyAsync (device to device)");
  }

  // The routing model's count exchange (a few hundred bytes per MoE layer and micro-batch): waits for
  // the stream, as the real exchange through host memory does (parallel/expert_dispatch.cc).
  void to_host(void* dst, const Tensor& src, size_t bytes) override {
    if (!bytes) return;
    check(cudaMemcpyAsync(dst, src.data(), bytes, cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync (device to host)");
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }
  void from_host(const Tensor& dst, const void* src, size_t bytes) override {
    if (!bytes) return;
    check(cudaMemcpyAsync(dst.data(), src, bytes, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync (host to device)");
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");  // the host buffer dies after the call
  }

  // A span is a pair of events on the stream: the stream's time between them is the copies' (and, for the
  // routing model's count exchange, the host's turnaround, as a real exchange's). Pairs accumulate until
  // take_span_seconds reads them (once per phase of a step: a few thousand events at a seed rank).
  void begin_span() override {
    std::lock_guard<std::mutex> lock(span_mu_);
    if (depth_++ > 0) return;
    if (used_ + 2 > events_.size()) {
      for (int i = 0; i < 2; ++i) {
        cudaEvent_t e = nullptr;
        check(cudaEventCreate(&e), "cudaEventCreate");
        events_.push_back(e);
      }
    }
    check(cudaEventRecord(events_[used_], stream_), "cudaEventRecord");
  }
  void end_span() override {
    std::lock_guard<std::mutex> lock(span_mu_);
    if (--depth_ > 0) return;
    check(cudaEventRecord(events_[used_ + 1], stream_), "cudaEventRecord");
    used_ += 2;
  }
  double take_span_seconds() override {
    std::lock_guard<std::mutex> lock(span_mu_);
    if (used_ == 0) return 0.0;
    check(cudaEventSynchronize(events_[used_ - 1]), "cudaEventSynchronize");
    double seconds = 0;
    for (size_t i = 0; i < used_; i += 2) {
      float ms = 0;
      check(cudaEventElapsedTime(&ms, events_[i], events_[i + 1]), "cudaEventElapsedTime");
      seconds += 1e-3 * ms;
    }
    used_ = 0;
    return seconds;
  }

  void fill(const Tensor& dst, int64_t first, int64_t count) override {
    if (count <= 0) return;
    const size_t elem = dtype_size(dst.dtype());
    const void* pattern = device_pattern(dst.dtype(), count);
    check(cudaMemcpyAsync(static_cast<char*>(dst.data()) + static_cast<size_t>(first) * elem, pattern,
                          static_cast<size_t>(count) * elem, cudaMemcpyDeviceToDevice, stream_),
          "cudaMemcpyAsync (fill pattern)");
  }

 private:
  struct Pattern {
    void* data = nullptr;
    int64_t count = 0;
  };

  const void* device_pattern(DType dtype, int64_t count) {
    std::lock_guard<std::mutex> lock(mu_);
    Pattern& p = patterns_[dtype];
    if (p.count >= count) return p.data;
    // Earlier fills on the stream may still read the old buffer: wait before freeing it.
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    if (p.data) check(cudaFree(p.data), "cudaFree");
    p = Pattern{};
    const Tensor host = loopback_pattern(dtype, count);
    check(cudaMalloc(&p.data, host.nbytes()), "cudaMalloc (fill pattern)");
    check(cudaMemcpyAsync(p.data, host.data(), host.nbytes(), cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync (pattern upload)");
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");  // the host copy dies here
    p.count = count;
    return p.data;
  }

  cudaStream_t stream_;
  std::mutex mu_;
  std::map<DType, Pattern> patterns_;
  std::mutex span_mu_;
  int depth_ = 0;
  std::vector<cudaEvent_t> events_;  // pairs (begin, end); the first used_ recorded since the last take
  size_t used_ = 0;
};

}  // namespace

std::unique_ptr<LoopbackMover> make_cuda_loopback_mover(cudaStream_t stream) { return std::make_unique<CudaMover>(stream); }

}  // namespace quill
