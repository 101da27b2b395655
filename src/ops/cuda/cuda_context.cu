// CUDA resources and the device allocator. Every CUDA call is checked; a failure names the call.
#include "ops/cuda/cuda_context.h"
#include "ops/cuda/cuda_resources.h"
#include "ops/op_table.h"

namespace quill {

namespace {
class DeviceAllocator final : public Allocator {
 public:
  explicit DeviceAllocator(int device) : device_(device) {}
  void* allocate(size_t bytes) override {
    void* p = nullptr;
    QUILL_CUDA_CHECK(cudaSetDevice(device_));
    cudaError_t err = cudaMalloc(&p, bytes ? bytes : 1);
    QUILL_CHECK(err == cudaSuccess, "out of GPU memory allocating {} bytes on device {} ({})", bytes, device_,
                cudaGetErrorString(err));
    return p;
  }
  void deallocate(void* ptr, size_t) override { cudaFree(ptr); }
  Device device() const override { return Device::CUDA; }

 private:
  int device_;
};
}  // namespace

bool cuda_device_available() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

std::string cuda_device_name(int device) {
  cudaDeviceProp prop{};
  QUILL_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  return prop.name;
}

CudaBackend::CudaBackend(int device) : resources_(new CudaResources), allocator_(new DeviceAllocator(device)) {
  resources_->device = device;
  QUILL_CUDA_CHECK(cudaSetDevice(device));
  QUILL_CUDA_CHECK(cudaStreamCreateWithFlags(&resources_->stream, cudaStreamNonBlocking));
  QUILL_CHECK(cublasLtCreate(&resources_->lt) == CUBLAS_STATUS_SUCCESS, "cublasLtCreate failed on device {}", device);
  QUILL_CUDA_CHECK(cudaMalloc(&resources_->workspace, resources_->workspace_bytes));
}

CudaBackend::~CudaBackend() {
  if (resources_->workspace) cudaFree(resources_->workspace);
  if (resources_->lt) cublasLtDestroy(resources_->lt);
  if (resources_->stream) cudaStreamDestroy(resources_->stream);
}

DeviceContext CudaBackend::context() const {
  DeviceContext ctx;
  ctx.device = Device::CUDA;
  ctx.cuda = resources_.get();
  ctx.allocator = allocator_.get();
  ctx.activation = DType::BF16;
  ctx.cuda_ops = &cuda_op_table();
  return ctx;
}

void CudaBackend::synchronize() const { QUILL_CUDA_CHECK(cudaStreamSynchronize(resources_->stream)); }

}  // namespace quill
