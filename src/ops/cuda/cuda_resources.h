// What CUDA kernel files need from the backend: the resources behind a CUDA DeviceContext, and
// the error-checking macros. Included only by CUDA sources (it includes CUDA headers).
#pragma once

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <memory>

#include "base/comm_timeline.h"
#include "base/error.h"
#include "ops/cuda/cublaslt_library.h"
#include "ops/device_context.h"
#include "ops/grouped_gemm_kernel.h"
#include "ops/kernel_trials.h"

namespace quill {

namespace cuda {
struct GemmPlanCache;  // gemm_plan_cache.h
}

// Three streams: `stream` runs the ops (compute); `comm_stream` runs the communicators'
// collectives (comm/nccl), so that they can overlap compute; `copy_stream` runs the asynchronous
// host<->device copies (ops::transfer_async). Work crosses between them only through events.
struct CudaResources {
  int device = 0;
  cudaStream_t stream = nullptr;
  cudaStream_t comm_stream = nullptr;
  cudaStream_t copy_stream = nullptr;
  cuda::CublasLt cublaslt;  // the library's functions (cublaslt_library.h), loaded by CudaBackend
  cublasLtHandle_t lt = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 32u << 20;  // cuBLASLt's recommended workspace on Hopper is 32 MiB
  std::shared_ptr<cuda::GemmPlanCache> gemm_plans;  // created by the first GEMM (gemm.cu)
  // CudaBackendOptions::attention_dq_arrival_order (read by the attention backward).
  bool attention_dq_arrival_order = false;
  // CudaBackendOptions::grouped_gemm_kernel (read by the grouped GEMMs, bf16 and FP8: grouped_gemm_wg.h).
  GroupedGemmKernel grouped_gemm_kernel = GroupedGemmKernel::kAuto;
  // CudaBackendOptions::grouped_wgrad_kernel (read by grouped_linear_backward_weight: grouped_wgrad_wg.h).
  GroupedGemmKernel grouped_wgrad_kernel = GroupedGemmKernel::kAuto;
  // The kernels on trial (ops/kernel_trials.h): CudaBackendOptions::grouped_wgrad_form, attention_bias_rows,
  // attention_forward_form and attention_backward_form.
  GroupedWgradForm grouped_wgrad_form = GroupedWgradForm::kHalf;
  AttentionBiasRows attention_bias_rows = AttentionBiasRows::kCublasLt;
  AttentionForwardForm attention_forward_form = AttentionForwardForm::kNarrow;
  AttentionBackwardForm attention_backward_form = AttentionBackwardForm::kConsumers;
  // Where the context's NCCL communicators tell its profiler about their operations.
  std::shared_ptr<CommTimeline> comm_timeline = std::make_shared<CommTimeline>();
};

inline cudaStream_t stream_of(const DeviceContext& ctx) { return ctx.cuda->stream; }
inline cudaStream_t comm_stream_of(const DeviceContext& ctx) { return ctx.cuda->comm_stream; }
inline cudaStream_t copy_stream_of(const DeviceContext& ctx) { return ctx.cuda->copy_stream; }

}  // namespace quill

// Checks a CUDA runtime call; the error names the call.
#define QUILL_CUDA_CHECK(call)                                                                    \
  do {                                                                                            \
    cudaError_t err_ = (call);                                                                    \
    QUILL_CHECK(err_ == cudaSuccess, "CUDA call {} failed: {}", #call, cudaGetErrorString(err_)); \
  } while (0)

// Checks the launch that just happened (configuration errors surface here, not at sync).
#define QUILL_CUDA_CHECK_LAUNCH(kernel_name)                                                          \
  do {                                                                                                \
    cudaError_t err_ = cudaGetLastError();                                                            \
    QUILL_CHECK(err_ == cudaSuccess, "CUDA kernel {} failed to launch: {}", kernel_name, cudaGetErrorString(err_)); \
  } while (0)
