// StagedComm: the Comm interface for GPU tensors over a CPU communicator (MPI), each operation
// staged through host memory: wait for the stream, copy the device tensors to the host, run the
// CPU collective, copy the results back. For several ranks sharing one GPU, where NCCL refuses to
// run (two ranks on one device), so that every layout's CUDA path can be tested on one GPU.
// Synchronous and slow by design; NCCL (comm/nccl/nccl_comm.h) stays the path for real runs.
// Built only with the CUDA backend.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <vector>

#include "comm/comm.h"

namespace quill {

class StagedComm final : public Comm {
 public:
  // `host` moves CPU tensors (an MpiComm); device tensors are read after `stream`'s earlier work.
  StagedComm(std::unique_ptr<Comm> host, cudaStream_t stream);

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  Device device() const override { return Device::CUDA; }
  const std::string& name() const override { return host_->name(); }

  void all_reduce(const Tensor& t, ReduceOp op) override;
  void reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) override;
  void all_gather(const Tensor& in, const Tensor& out) override;
  void all_to_all(const Tensor& in, const std::vector<int64_t>& send_counts, const Tensor& out,
                  const std::vector<int64_t>& recv_counts) override;
  void broadcast(const Tensor& t, int root) override;
  void send(const Tensor& t, int peer) override;
  void recv(const Tensor& t, int peer) override;
  void send_recv(const Tensor& send, int dst, const Tensor& recv, int src) override;
  void barrier() override;
  std::unique_ptr<Comm> split(const std::vector<int>& group, const std::string& name) override;
  // The host communicator's own isolated split (staging is synchronous: no stream to keep apart).
  std::unique_ptr<Comm> split_isolated(const std::vector<int>& group, const std::string& name) override;

 private:
  Tensor to_host(const Tensor& device) const;          // waits for the stream first
  void to_device(const Tensor& host, const Tensor& device) const;

  std::unique_ptr<Comm> host_;
  cudaStream_t stream_;
};

}  // namespace quill
