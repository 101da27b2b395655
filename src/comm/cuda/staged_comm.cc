#include "comm/cuda/staged_comm.h"

#include <cuda_runtime.h>

#include "base/error.h"

namespace quill {

namespace {
void check(cudaError_t e, const char* what, const std::string& comm) {
  QUILL_CHECK(e == cudaSuccess, "comm '{}' (staged through host memory): {} failed: {}", comm, what, cudaGetErrorString(e));
}
}  // namespace

StagedComm::StagedComm(std::unique_ptr<Comm> host, cudaStream_t stream) : host_(std::move(host)), stream_(stream) {
  QUILL_CHECK(host_ && host_->device() == Device::CPU, "StagedComm: the host communicator must move CPU tensors");
}

// Both copies are ordered on the communicator's stream and waited for: a plain cudaMemcpy runs on
// the legacy stream, which a non-blocking compute stream does not wait for, and from pageable
// memory it may return before the device holds the data (measured on the H200: DP2 losses that
// missed the other rank's sum on some steps).
Tensor StagedComm::to_host(const Tensor& d) const {
  QUILL_CHECK(d.device() == Device::CUDA, "comm '{}': a {} tensor given to a GPU communicator", name(), d.describe());
  Tensor h = Tensor::empty(d.shape(), d.dtype());
  if (d.nbytes() > 0)
    check(cudaMemcpyAsync(h.data(), d.data(), d.nbytes(), cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync D2H", name());
  check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize", name());
  return h;
}

void StagedComm::to_device(const Tensor& h, const Tensor& d) const {
  if (d.nbytes() > 0)
    check(cudaMemcpyAsync(d.data(), h.data(), d.nbytes(), cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync H2D", name());
  check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize", name());
}

void StagedComm::all_reduce(const Tensor& t, ReduceOp op) {
  Tensor h = to_host(t);
  host_->all_reduce(h, op);
  to_device(h, t);
}

void StagedComm::reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) {
  Tensor hin = to_host(in), hout = Tensor::empty(out.shape(), out.dtype());
  host_->reduce_scatter(hin, hout, op);
  to_device(hout, out);
}

void StagedComm::all_gather(const Tensor& in, const Tensor& out) {
  Tensor hin = to_host(in), hout = Tensor::empty(out.shape(), out.dtype());
  host_->all_gather(hin, hout);
  to_device(hout, out);
}

void StagedComm::all_to_all(const Tensor& in, const std::vector<int64_t>& send_counts, const Tensor& out,
                            const std::vector<int64_t>& recv_counts) {
  Tensor hin = to_host(in), hout = Tensor::empty(out.shape(), out.dtype());
  host_->all_to_all(hin, send_counts, hout, recv_counts);
  to_device(hout, out);
}

void StagedComm::broadcast(const Tensor& t, int root) {
  Tensor h = to_host(t);
  host_->broadcast(h, root);
  to_device(h, t);
}

void StagedComm::send(const Tensor& t, int peer) { host_->send(to_host(t), peer); }

void StagedComm::recv(const Tensor& t, int peer) {
  Tensor h = Tensor::empty(t.shape(), t.dtype());
  check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize", name());
  host_->recv(h, peer);
  to_device(h, t);
}

void StagedComm::send_recv(const Tensor& send, int dst, const Tensor& recv, int src) {
  Tensor hs = to_host(send), hr = Tensor::empty(recv.shape(), recv.dtype());
  host_->send_recv(hs, dst, hr, src);
  to_device(hr, recv);
}

void StagedComm::barrier() {
  check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize", name());
  host_->barrier();
}

std::unique_ptr<Comm> StagedComm::split(const std::vector<int>& group, const std::string& name) {
  return std::make_unique<StagedComm>(host_->split(group, name), stream_);
}

std::unique_ptr<Comm> StagedComm::split_isolated(const std::vector<int>& group, const std::string& name) {
  return std::make_unique<StagedComm>(host_->split_isolated(group, name), stream_);
}

}  // namespace quill
