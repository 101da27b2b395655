// CUDA resources and the device allocator. Every CUDA call is checked; a failure names the call.
#include "base/parallel_memory.h"
#include "ops/cuda/attention_wg.h"
#include "ops/cuda/cuda_context.h"
#include "ops/cuda/cuda_resources.h"
#include "ops/cuda/memory_stats.h"
#include "ops/op_table.h"

#include <atomic>
#include <utility>

namespace quill {

namespace {
// Stream-ordered allocation from the device's default memory pool, on the backend's one stream.
// Why: cudaFree synchronises the device, and a training step frees thousands of tensors; the
// measured gaps between kernels (bench/results/2026-11-30-slice-v1) were 7% of a step. The pool keeps
// freed blocks (release threshold: never) and hands them out again in stream order, so a warm step
// makes no driver allocation. Every kernel and copy runs on this stream (ops, NCCL), which is what
// makes stream-ordered reuse safe; a second stream would have to record events before freeing.
class DeviceAllocator final : public Allocator {
 public:
  DeviceAllocator(int device, int poison_byte) : device_(device), poison_byte_(poison_byte) {
    cudaMemPool_t pool = nullptr;
    QUILL_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
    uint64_t keep_everything = UINT64_MAX;
    QUILL_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_everything));
  }
  void set_stream(cudaStream_t stream) { stream_ = stream; }
  void* allocate(size_t bytes) override {
    void* p = nullptr;
    QUILL_CUDA_CHECK(cudaSetDevice(device_));
    cudaError_t err = cudaMallocAsync(&p, bytes ? bytes : 1, stream_);
    QUILL_CHECK(err == cudaSuccess, "out of GPU memory allocating {} bytes on device {} ({} in use, {} at peak) ({})",
                bytes, device_, in_use_.load(), peak_.load(), cudaGetErrorString(err));
    if (poison_byte_ >= 0) QUILL_CUDA_CHECK(cudaMemsetAsync(p, poison_byte_, bytes, stream_));
    // Byte counters for the benchmark's peak-memory figure (memory_stats.h); atomic, as frees may come from any thread.
    const int64_t now = in_use_.fetch_add(static_cast<int64_t>(bytes)) + static_cast<int64_t>(bytes);
    int64_t peak = peak_.load();
    while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
    }
    allocations_.fetch_add(1);
    return p;
  }
  void deallocate(void* ptr, size_t bytes) override {
    cudaFreeAsync(ptr, stream_);
    in_use_.fetch_sub(static_cast<int64_t>(bytes));
  }
  Device device() const override { return Device::CUDA; }

  int64_t in_use() const { return in_use_.load(); }
  int64_t peak() const { return peak_.load(); }
  int64_t allocations() const { return allocations_.load(); }
  void reset_peak() { peak_.store(in_use_.load()); }

 private:
  int device_;
  int poison_byte_;  // CudaBackendOptions::poison_byte
  cudaStream_t stream_ = nullptr;
  std::atomic<int64_t> in_use_{0}, peak_{0}, allocations_{0};
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

// Page-locked host memory (cudaHostAlloc): the host side of asynchronous copies, which from
// pageable memory would be staged and synchronous.
class PinnedHostAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes) override {
    void* p = nullptr;
    const cudaError_t err = cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocDefault);
    QUILL_CHECK(err == cudaSuccess, "out of pinned host memory allocating {} bytes ({})", bytes, cudaGetErrorString(err));
    return p;
  }
  // Zeros written on all cores: a large rank's offloaded optimizer state is tens of GB of pinned zeros.
  void* allocate_zeroed(size_t bytes) override {
    void* p = allocate(bytes);
    parallel_memset_zero(p, bytes);
    return p;
  }
  void deallocate(void* p, size_t) override { cudaFreeHost(p); }
  Device device() const override { return Device::CPU; }
};

CudaBackend::CudaBackend(int device, const CudaBackendOptions& options)
    : resources_(new CudaResources),
      allocator_(new DeviceAllocator(device, options.poison_byte)),
      pinned_(new PinnedHostAllocator) {
  QUILL_CHECK(options.poison_byte >= -1 && options.poison_byte <= 255, "CUDA backend: poison byte {} is not -1 or 0-255",
              options.poison_byte);
  resources_->device = device;
  resources_->attention_dq_arrival_order = options.attention_dq_arrival_order;
  resources_->grouped_gemm_kernel = options.grouped_gemm_kernel;
  resources_->grouped_wgrad_kernel = options.grouped_wgrad_kernel;
  resources_->grouped_wgrad_form = options.grouped_wgrad_form;
  resources_->attention_bias_rows = options.attention_bias_rows;
  resources_->attention_forward_form = options.attention_forward_form;
  resources_->attention_backward_form = options.attention_backward_form;
  QUILL_CUDA_CHECK(cudaSetDevice(device));
  // A forced kernel that cannot run here would fall back call by call without a word: refuse it once, up front.
  QUILL_CHECK(options.grouped_gemm_kernel != GroupedGemmKernel::kWgmma || cuda::attn_wg::device_supported(),
              "--grouped-gemm-kernel wgmma: device {} is not a compute capability 9.0 GPU (the kernel needs sm_90a's "
              "wgmma and TMA); give auto or cublaslt", device);
  for (const auto& [on_trial, flag] : {std::pair{options.attention_forward_form != AttentionForwardForm::kNarrow,
                                                 "--attention-forward-form"},
                                       std::pair{options.attention_backward_form != AttentionBackwardForm::kConsumers,
                                                 "--attention-backward-form"}})
    QUILL_CHECK(!on_trial || cuda::attn_wg::device_supported(),
                "{}: the form on trial is one of the Hopper attention kernels, which device {} (not a compute "
                "capability 9.0 GPU) never runs; leave the flag out", flag, device);
  QUILL_CUDA_CHECK(cudaStreamCreateWithFlags(&resources_->stream, cudaStreamNonBlocking));
  QUILL_CUDA_CHECK(cudaStreamCreateWithFlags(&resources_->comm_stream, cudaStreamNonBlocking));
  QUILL_CUDA_CHECK(cudaStreamCreateWithFlags(&resources_->copy_stream, cudaStreamNonBlocking));
  static_cast<DeviceAllocator*>(allocator_.get())->set_stream(resources_->stream);
  resources_->cublaslt = cuda::load_cublaslt();  // opened here, not at process start (cublaslt_library.h)
  QUILL_CHECK(resources_->cublaslt.cublasLtCreate(&resources_->lt) == CUBLAS_STATUS_SUCCESS,
              "cublasLtCreate failed on device {}", device);
  QUILL_CUDA_CHECK(cudaMalloc(&resources_->workspace, resources_->workspace_bytes));
}

CudaBackend::~CudaBackend() {
  for (cudaStream_t st : {resources_->comm_stream, resources_->copy_stream})
    if (st) cudaStreamSynchronize(st);
  if (resources_->stream) cudaStreamSynchronize(resources_->stream);  // pending frees and kernels finish first
  if (resources_->workspace) cudaFree(resources_->workspace);
  if (resources_->lt) resources_->cublaslt.cublasLtDestroy(resources_->lt);
  for (cudaStream_t st : {resources_->comm_stream, resources_->copy_stream})
    if (st) cudaStreamDestroy(st);
  if (resources_->stream) cudaStreamDestroy(resources_->stream);
}

DeviceContext CudaBackend::context() const {
  DeviceContext ctx;
  ctx.device = Device::CUDA;
  ctx.cuda = resources_.get();
  ctx.allocator = allocator_.get();
  ctx.host_pinned = pinned_.get();
  ctx.activation = DType::BF16;
  ctx.cuda_ops = &cuda_op_table();
  return ctx;
}

void CudaBackend::synchronize() const { QUILL_CUDA_CHECK(cudaStreamSynchronize(resources_->stream)); }

bool cuda_memory_stats(const DeviceContext& ctx, CudaMemoryStats& out) {
  auto* a = dynamic_cast<DeviceAllocator*>(ctx.allocator);
  if (a == nullptr) return false;
  out.in_use_bytes = a->in_use();
  out.peak_bytes = a->peak();
  out.allocations = a->allocations();
  size_t free_b = 0, total_b = 0;
  if (ctx.cuda != nullptr && cudaSetDevice(ctx.cuda->device) == cudaSuccess &&
      cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) {
    out.device_free_bytes = static_cast<int64_t>(free_b);
    out.device_total_bytes = static_cast<int64_t>(total_b);
  }
  return true;
}

void cuda_synchronize(const DeviceContext& ctx) {
  QUILL_CHECK(ctx.device == Device::CUDA && ctx.cuda != nullptr, "cuda_synchronize: not a CUDA context");
  QUILL_CUDA_CHECK(cudaStreamSynchronize(ctx.cuda->stream));
}

bool cuda_reset_peak_memory(const DeviceContext& ctx) {
  auto* a = dynamic_cast<DeviceAllocator*>(ctx.allocator);
  if (a == nullptr) return false;
  a->reset_peak();
  return true;
}

}  // namespace quill
