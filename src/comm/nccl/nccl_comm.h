// NcclComm: the Comm interface over NCCL, for GPU tensors; built only with the CUDA backend
// (QUILL_HAVE_NCCL). One process per GPU; NCCL is bootstrapped through MPI (rank 0 of the
// bootstrap communicator makes the unique id and broadcasts it). Operations run on a
// communication stream of their own, off the compute stream passed in: each waits (by an event)
// for the compute stream's earlier work and returns at once; the plain forms make the compute
// stream wait for them, the start_* forms leave that to the handle, so compute can overlap them.
//
// Nothing hangs silently: a watchdog thread, shared by a communicator and those split from it,
// follows every operation (a CUDA event recorded after it) and polls ncclCommGetAsyncError.
// When an operation is not done after CommOptions::timeout_s, or NCCL reports an error, it
// prints which rank, communicator and operation, aborts the NCCL communicators
// (ncclCommAbort) and ends the job (MPI_Abort). check_args is not implemented for NCCL.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <memory>
#include <string>
#include <vector>

#include "base/comm_timeline.h"
#include "comm/comm.h"

namespace quill {

class NcclWatchdog;  // nccl_comm.cc

// Makes this process's GPU current: device local_rank, or device 0 when the launcher shows each
// rank one GPU (CUDA_VISIBLE_DEVICES per task). Fails, naming the counts, when the node runs
// more ranks than it has GPUs, unless `share` lets ranks share GPUs (local_rank modulo the count;
// their device tensors then travel through host memory, comm/cuda/staged_comm.h). Returns the
// device index.
int select_cuda_device(int local_rank, int local_size, bool share = false);
// Whether two ranks of `bootstrap` (a CPU communicator) use the same GPU, by the PCI bus id of
// each rank's current device. Collective over bootstrap.
bool ranks_share_a_gpu(Comm& bootstrap);

class NcclComm final : public Comm {
 public:
  // Collective over `bootstrap` (a CPU communicator, the MPI world say): ranks and size are
  // bootstrap's. The current CUDA device must be this rank's GPU (select_cuda_device).
  // `comm_stream` runs the collectives (the device context's communication stream; null: one of
  // the communicator's own).
  static std::unique_ptr<NcclComm> create(Comm& bootstrap, cudaStream_t stream, CommOptions options = {},
                                          std::string name = "world", cudaStream_t comm_stream = nullptr);
  // Every rank passes the same id (from ncclGetUniqueId on one of them), e.g. one thread per GPU.
  NcclComm(const ncclUniqueId& id, int size, int rank, cudaStream_t stream, CommOptions options = {},
           std::string name = "world", cudaStream_t comm_stream = nullptr);
  ~NcclComm() override;
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Device device() const override { return Device::CUDA; }
  const std::string& name() const override { return name_; }

  void all_reduce(const Tensor& t, ReduceOp op) override;
  void reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) override;
  void all_gather(const Tensor& in, const Tensor& out) override;
  void all_to_all(const Tensor& in, const std::vector<int64_t>& send_counts, const Tensor& out,
                  const std::vector<int64_t>& recv_counts) override;
  void broadcast(const Tensor& t, int root) override;
  void send(const Tensor& t, int peer) override;
  void recv(const Tensor& t, int peer) override;
  void send_recv(const Tensor& send, int dst, const Tensor& recv, int src) override;
  // Waits (host) until every rank has reached it and this stream's earlier work is done.
  void barrier() override;
  // ncclCommSplit; the new communicator shares this one's streams and watchdog.
  std::unique_ptr<Comm> split(const std::vector<int>& group, const std::string& name) override;
  // ncclCommSplit with a communication stream of its own (made here, destroyed with the last
  // communicator that uses it, and inherited by the splits of the new one); the watchdog is shared.
  // Its operations order against the compute stream by events like every other's, and against the
  // other communicators' only through the compute stream (docs/decisions/expert-exchange-stream.md).
  std::unique_ptr<Comm> split_isolated(const std::vector<int>& group, const std::string& name) override;

  std::unique_ptr<CommHandle> start_reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) override;
  std::unique_ptr<CommHandle> start_all_gather(const Tensor& in, const Tensor& out) override;
  std::unique_ptr<CommHandle> start_send_recv(const Tensor& send, int dst, const Tensor& recv, int src) override;
  std::unique_ptr<CommHandle> start_all_to_all(const Tensor& in, const std::vector<int64_t>& send_counts,
                                               const Tensor& out, const std::vector<int64_t>& recv_counts) override;

  // Tells `timeline`'s listener (a profiler) where each later operation of this communicator, and of
  // those split from it afterwards, begins and ends on its stream (base/comm_timeline.h).
  void set_timeline(std::shared_ptr<CommTimeline> timeline) { timeline_ = std::move(timeline); }

  cudaStream_t stream() const { return stream_; }            // the caller's (compute) stream
  cudaStream_t comm_stream() const { return streams_->comm; }  // where the collectives run
  ncclComm_t handle() const { return comm_; }
  int cuda_device() const { return device_; }

 private:
  // The communication stream, shared by a communicator and those split from it; destroyed with the
  // last of them when the communicator made it.
  struct Streams {
    cudaStream_t comm = nullptr;
    bool owned = false;
    ~Streams();
  };
  NcclComm(ncclComm_t comm, cudaStream_t stream, CommOptions options, std::string name, std::shared_ptr<NcclWatchdog> watchdog,
           std::shared_ptr<Streams> streams);
  void init_common();
  std::unique_ptr<Comm> split_with(const std::vector<int>& group, const std::string& name, std::shared_ptr<Streams> streams);
  std::string who() const;
  [[noreturn]] void fail(const std::string& message) const;  // local argument errors: policy
  void check(const std::string& problem) const;
  // Enqueues `enqueue` (NCCL calls on the communication stream) after the compute stream's work
  // so far, under the watchdog (a failed call ends the job); returns an event recorded after it.
  // `op`, `payload_bytes` and `bus_bytes` describe it to the timeline's listener, if any.
  template <typename F>
  cudaEvent_t launch(const std::string& what, const char* op, int64_t payload_bytes, int64_t bus_bytes, F&& enqueue);
  // launch, then the compute stream waits for it.
  template <typename F>
  void run(const std::string& what, const char* op, int64_t payload_bytes, int64_t bus_bytes, F&& enqueue);

  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  CommOptions options_;
  std::string name_, who_;
  int rank_ = 0, size_ = 1, device_ = 0;
  void* scratch_ = nullptr;  // one int on the device, for barrier()
  std::shared_ptr<NcclWatchdog> watchdog_;
  std::shared_ptr<Streams> streams_;
  std::shared_ptr<CommTimeline> timeline_;  // null: nobody listens
};

}  // namespace quill
