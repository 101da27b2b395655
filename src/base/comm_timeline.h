// How a profiler sees the collectives that communicators run on streams of their own.
//
// The compute stream's view of a collective (ops/collective.h's row) is the time the compute stream
// waited for it; a collective started early (CommHandle) and waited for later shows there as almost
// nothing, and a blocking one shows as all of its time. To say how long each collective itself took,
// and how much of that ran under compute, the communicator tells a listener where each operation
// begins and ends on its stream: `span_begin` once its stream is ordered behind the compute stream's
// earlier work (so what follows is the operation itself, and waiting for the peers), `span_end`
// once the operation is enqueued. The profiler records an event at each (ops/cuda/profiling.h).
//
// One CommTimeline per device context, shared by the context's communicators (and those split from
// them) and its profiler. Plain C++: streams pass as void* (a cudaStream_t). Lives in base/ because
// both the communicators (comm/) and the ops (ops/cuda/) see it and neither may include the other.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace quill {

// What the communicator knows of one operation.
struct CommSpanInfo {
  std::string group;   // the communicator's name ("tp", "dp", "ep", "pp", ...)
  const char* op = "";  // "all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast", "send", "recv",
                        // "send_recv", "barrier"
  int group_size = 1;
  int64_t payload_bytes = 0;  // the operation's "size" as nccl-tests counts it (collective_ledger.h)
  // Bytes this rank moves under the ring algorithms (collective_ledger.h): over the operation's time
  // they give nccl-tests' bus bandwidth, so the figure compares with NCCL's own at that size.
  int64_t bus_bytes = 0;
};

class CommSpanListener {
 public:
  virtual ~CommSpanListener() = default;
  virtual void span_begin(void* stream, const CommSpanInfo& info) = 0;
  virtual void span_end(void* stream) = 0;
};

class CommTimeline {
 public:
  // nullptr stops listening. The listener must outlive its registration.
  void listen(CommSpanListener* listener) { listener_.store(listener); }
  CommSpanListener* listener() const { return listener_.load(); }

 private:
  std::atomic<CommSpanListener*> listener_{nullptr};
};

}  // namespace quill
