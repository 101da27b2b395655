// The CUDA op-test harness (in the spirit of ggml's test-backend-ops): build inputs on the host in
// fp32, run the CPU reference, run the CUDA op on device copies in the dtypes of
// docs/decisions/cuda-precision.md, and compare by relative L2 error with a tolerance per op.
// Outputs live inside guard bands that must come back untouched, and are poisoned with NaN before
// the op runs so that an element the kernel never wrote fails the comparison.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "ops/cuda/cuda_context.h"
#include "tensor/tensor.h"

namespace quill::test {

// Skips the calling test when the machine has no GPU (CI).
#define QUILL_REQUIRE_GPU()                                               \
  do {                                                                    \
    if (!::quill::cuda_device_available()) GTEST_SKIP() << "no GPU here"; \
  } while (0)

// One backend per test process.
CudaBackend& gpu();
DeviceContext gpu_ctx();
// A backend whose experts' GEMMs (forward, input gradient and weight gradient: CudaBackendOptions::grouped_gemm_kernel
// and grouped_wgrad_kernel) all take `kernel`, one per choice and test process: the kernel tests' two backends.
CudaBackend& grouped_gpu(GroupedGemmKernel kernel);

// A device tensor inside guard bands of `kGuardBytes` on each side, filled with a byte pattern.
// With misalign_bytes > 0 the tensor starts that many bytes past a 16-byte boundary (as a view of
// rows inside a larger buffer may), so that kernels with 16-byte accesses must take their fallback;
// the front band then grows by those bytes.
class GuardedDevice {
 public:
  static constexpr size_t kGuardBytes = 256;
  GuardedDevice(const Shape& shape, DType dtype, size_t misalign_bytes = 0);
  const Tensor& tensor() const { return tensor_; }
  // True when both guard bands still hold the pattern.
  bool guards_intact() const;

 private:
  std::shared_ptr<Storage> storage_;
  Tensor tensor_;
  size_t front_bytes_ = kGuardBytes;
};

// Host fp32 tensor -> device tensor of `dtype` (converted on the host first).
Tensor to_device(const Tensor& host_f32, DType dtype);
// Same, inside guard bands (misaligned by misalign_bytes); the caller keeps the GuardedDevice alive.
std::unique_ptr<GuardedDevice> to_guarded_device(const Tensor& host_f32, DType dtype, size_t misalign_bytes = 0);
// A guarded device output poisoned with NaN (float dtypes) or 0x7f bytes (integers).
std::unique_ptr<GuardedDevice> poisoned_output(const Shape& shape, DType dtype, size_t misalign_bytes = 0);
// Device tensor (any float dtype, or I32/I64) -> host tensor (floats converted to fp32).
Tensor to_host_f32(const Tensor& device);
Tensor to_host(const Tensor& device);

// Rounds a host fp32 tensor through bf16 (so the CPU reference sees exactly the GPU's inputs).
Tensor round_bf16(const Tensor& host_f32);
// The harness writes inputs with cudaMemcpy/cudaMemset on the legacy stream, which does not order against the
// backend's non-blocking stream: a test waits for them (a gtest failure if the copies failed) before an op runs.
void inputs_ready();
// Two host tensors of one dtype hold the same bytes (the same-bits checks of the determinism guarantee).
bool same_bits(const Tensor& a, const Tensor& b);
// A host I64 [E] tensor of per-expert row counts (the grouped ops' counts_E).
Tensor host_counts(const std::vector<int64_t>& counts);

// Relative L2 error of got against ref (both host fp32); NaN or Inf anywhere fails. Adds a gtest
// failure naming `what` when above tol, and returns the error.
double expect_close(const std::string& what, const Tensor& got, const Tensor& ref, double tol);
// Elements of got (host fp32) farther from ref than `fraction` of ref's root mean square. A relative L2 tolerance
// hides a few wrong rows among thousands (the FP8 experts' kernel's 45 of 49,457 rows measured 0.0012, 2026-12-07);
// two kernels that sum the same products in other orders stay within a few roundings of each other everywhere.
int64_t far_elements(const Tensor& got, const Tensor& ref, double fraction = 0.05);
// The same for a device result (any float dtype, brought to the host in fp32), with a line printed either way
// ("  WHAT  rel L2 E (tol T)"), so that a passing run's log still shows each error.
double expect_device_close(const std::string& what, const Tensor& device, const Tensor& ref, double tol);

}  // namespace quill::test
