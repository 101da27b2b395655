// The CUDA backend's per-device resources (one stream, a cuBLASLt handle and its workspace) and
// its device allocator. Created explicitly and owned by whoever runs the model; nothing global.
#pragma once

#include <memory>
#include <string>

#include "ops/device_context.h"
#include "ops/grouped_gemm_kernel.h"
#include "ops/kernel_trials.h"

namespace quill {

// True when the CUDA runtime sees at least one GPU (false, not an error, on a machine without one).
bool cuda_device_available();
// The name of GPU `device` ("NVIDIA H200").
std::string cuda_device_name(int device);

struct OpTable;
// The CUDA implementations of the ops (ops/cuda/op_table.cu).
const OpTable& cuda_op_table();

// How a backend is set up beyond its device.
struct CudaBackendOptions {
  // -1: none. 0-255: every device allocation is filled with this byte before it is handed out (in
  // stream order). A debugging aid for bit-reproducibility (issue 24): results that do not change
  // between two fills read no memory that nothing wrote. Costs one memset per allocation.
  int poison_byte = -1;
  // The attention backward adds its key tiles into dQ in arrival order instead of the fixed order: not
  // bit-reproducible, a few percent faster; only to measure the noise floor of float-sum order when two runs
  // are compared (--attention-dq-order arrival; docs/determinism.md).
  bool attention_dq_arrival_order = false;
  // The routed experts' forward and input-gradient GEMMs (grouped_linear_forward, _backward_input and their FP8
  // forms): cuBLASLt, one GEMM per expert, quill's wgmma kernel, one launch for every expert (grouped_gemm_wg.h), or
  // auto (the default), each call by its shape as measured (--grouped-gemm-kernel; docs/decisions/grouped-gemm-wgmma.md).
  // wgmma also takes the dense FP8 forward and input-gradient GEMMs, as one group (auto leaves those to cuBLASLt).
  GroupedGemmKernel grouped_gemm_kernel = GroupedGemmKernel::kAuto;
  // The routed experts' weight gradient (grouped_linear_backward_weight): cuBLASLt, one GEMM per expert, quill's
  // wgmma kernel, one launch for every expert, the old fp32 gradient loaded under the product and the new one
  // stored by TMA (grouped_wgrad_wg.h), or auto, each call by its shape as measured (--grouped-wgrad-kernel;
  // docs/decisions/grouped-wgrad.md). cuBLASLt by default until the kernel's present form has run its tests on a GPU.
  GroupedGemmKernel grouped_wgrad_kernel = GroupedGemmKernel::kAuto;
  // Kernels on trial (ops/kernel_trials.h; --grouped-wgrad-form, --attention-bias-rows, --attention-forward-form,
  // --attention-backward-form): the form of quill's weight-gradient kernel where it runs, the attention bias rows'
  // path, the Hopper attention forward's key tiles and its backward's form. The defaults are the measured ones.
  GroupedWgradForm grouped_wgrad_form = GroupedWgradForm::kHalf;
  AttentionBiasRows attention_bias_rows = AttentionBiasRows::kCublasLt;
  AttentionForwardForm attention_forward_form = AttentionForwardForm::kNarrow;
  AttentionBackwardForm attention_backward_form = AttentionBackwardForm::kConsumers;
};

// Owns the resources behind a DeviceContext for one GPU.
class CudaBackend {
 public:
  explicit CudaBackend(int device, const CudaBackendOptions& options = {});
  ~CudaBackend();
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  DeviceContext context() const;
  void synchronize() const;

 private:
  std::unique_ptr<CudaResources> resources_;
  std::unique_ptr<Allocator> allocator_;
  std::unique_ptr<Allocator> pinned_;  // page-locked host memory
};

}  // namespace quill
