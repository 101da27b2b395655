#include "comm/cuda/event_join.h"

#include <cuda_runtime.h>

namespace quill {

cudaEvent_t record_event(cudaStream_t stream) {
  cudaEvent_t e = nullptr;
  cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
  cudaEventRecord(e, stream);
  return e;
}

void join(cudaStream_t waiter, cudaEvent_t done) {
  cudaStreamWaitEvent(waiter, done, 0);
  cudaEventDestroy(done);
}

}  // namespace quill
