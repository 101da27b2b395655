// The GPU's StandInClock (comm/standin_clock.h): each stand-in is a spin kernel (comm/cuda/standin_spin.h)
// on a communication stream, ordered after the compute stream's earlier work by an event, as NcclComm
// orders its operations; a blocking call makes the compute stream wait for it, a started one when its
// handle is waited on. The spans go to the context's CommTimeline, so that the profiler's collectives
// table (time, bus GB/s, hidden %) reads the stand-ins as it reads NCCL's operations. Built only with the
// CUDA backend.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>

#include "base/comm_timeline.h"
#include "comm/standin_clock.h"

namespace quill {

// How much of the GPU one stand-in holds: NCCL runs one block per channel.
struct StandInShape {
  int ctas = 16;
  int threads = 512;
};

// `comm`: the stream the stand-ins of this clock run on (the context's communication stream; an isolated
// clock creates and owns one of its own). `timeline` may be null.
std::shared_ptr<StandInClock> make_cuda_standin_clock(cudaStream_t compute, cudaStream_t comm, const CommTimeline* timeline,
                                                      StandInShape shape);

}  // namespace quill
