#include "comm/cuda/standin_clock_cuda.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "comm/cuda/event_join.h"
#include "comm/cuda/standin_spin.h"

namespace quill {

namespace {

void check(cudaError_t e, const char* what) {
  QUILL_CHECK(e == cudaSuccess, "timed stand-in (CUDA): {} failed: {}", what, cudaGetErrorString(e));
}

class CudaStandInClock final : public StandInClock {
 public:
  CudaStandInClock(cudaStream_t compute, cudaStream_t comm, bool owns_comm, const CommTimeline* timeline,
                   StandInShape shape)
      : compute_(compute), comm_(comm), owns_comm_(owns_comm), timeline_(timeline), shape_(shape) {}
  ~CudaStandInClock() override {
    if (owns_comm_) {
      cudaStreamSynchronize(comm_);
      cudaStreamDestroy(comm_);
    }
  }

  std::unique_ptr<CommHandle> occupy(double seconds, const CommSpanInfo& info) override {
    join(comm_, record_event(compute_));  // after the compute stream's work so far
    CommSpanListener* listener = timeline_ ? timeline_->listener() : nullptr;
    if (listener) listener->span_begin(comm_, info);
    const auto ns = static_cast<uint64_t>(std::llround(std::max(seconds, 0.0) * 1e9));
    check(launch_standin_spin(comm_, shape_.ctas, shape_.threads, ns), "the stand-in's spin kernel");
    if (listener) listener->span_end(comm_);
    return std::make_unique<EventJoinHandle>(compute_, record_event(comm_));
  }

  std::shared_ptr<StandInClock> isolated() override {
    cudaStream_t own = nullptr;
    check(cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    return std::make_shared<CudaStandInClock>(compute_, own, true, timeline_, shape_);
  }

 private:
  cudaStream_t compute_, comm_;
  bool owns_comm_;
  const CommTimeline* timeline_;
  StandInShape shape_;
};

}  // namespace

std::shared_ptr<StandInClock> make_cuda_standin_clock(cudaStream_t compute, cudaStream_t comm, const CommTimeline* timeline,
                                                      StandInShape shape) {
  QUILL_CHECK(shape.ctas >= 1 && shape.threads >= 32 && shape.threads <= 1024 && shape.threads % 32 == 0,
              "timed stand-ins: {} blocks of {} threads (blocks >= 1, threads a multiple of 32 up to 1024)", shape.ctas,
              shape.threads);
  return std::make_shared<CudaStandInClock>(compute, comm, false, timeline, shape);
}

}  // namespace quill
