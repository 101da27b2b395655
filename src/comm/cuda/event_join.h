// How a communicator's own stream and its caller's stream order each other (NcclComm, the timed stand-ins):
// an event recorded on one stream, waited on by the other, and the handle of a started operation whose wait()
// makes the caller's stream wait for the operation's event. The host never blocks. Built only with CUDA.
#pragma once

#include <cuda_runtime_api.h>

#include "comm/comm.h"

namespace quill {

// An event recorded on `stream` now (after its work so far).
cudaEvent_t record_event(cudaStream_t stream);
// `waiter` waits for the event, which is released (CUDA keeps it until the wait resolves).
void join(cudaStream_t waiter, cudaEvent_t done);

class EventJoinHandle final : public CommHandle {
 public:
  EventJoinHandle(cudaStream_t caller, cudaEvent_t done) : caller_(caller), done_(done) {}
  ~EventJoinHandle() override { wait(); }  // never leave the caller unordered after the operation
  void wait() override {
    if (done_) join(caller_, done_);
    done_ = nullptr;
  }

 private:
  cudaStream_t caller_;
  cudaEvent_t done_;
};

}  // namespace quill
