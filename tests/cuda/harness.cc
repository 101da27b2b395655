#include "cuda/harness.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <utility>
#include <vector>

#include "base/error.h"
#include "util/test_util.h"

namespace quill::test {

CudaBackend& gpu() {
  static CudaBackend backend(0);
  return backend;
}

DeviceContext gpu_ctx() { return gpu().context(); }

CudaBackend& grouped_gpu(GroupedGemmKernel kernel) {
  auto options = [](GroupedGemmKernel k) {
    CudaBackendOptions o;
    o.grouped_gemm_kernel = o.grouped_wgrad_kernel = k;
    return o;
  };
  // Each made on first use (a backend forcing wgmma refuses a GPU without sm_90).
  switch (kernel) {
    case GroupedGemmKernel::kWgmma: {
      static CudaBackend backend(0, options(kernel));
      return backend;
    }
    case GroupedGemmKernel::kCublasLt: {
      static CudaBackend backend(0, options(kernel));
      return backend;
    }
    case GroupedGemmKernel::kAuto: break;
  }
  return gpu();  // auto is the default backend's choice
}

namespace {
constexpr unsigned char kGuardPattern = 0xA5;

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw Error(std::string(what) + ": " + cudaGetErrorString(err));
}
}  // namespace

GuardedDevice::GuardedDevice(const Shape& shape, DType dtype, size_t misalign_bytes)
    : front_bytes_(kGuardBytes + misalign_bytes) {
  const size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  const size_t total = front_bytes_ + bytes + kGuardBytes;
  void* p = nullptr;
  check(cudaMalloc(&p, total), "cudaMalloc");
  check(cudaMemset(p, kGuardPattern, total), "cudaMemset");
  // The backend's stream does not order against the legacy default stream: finish here.
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  storage_ = std::make_shared<Storage>(p, total, Device::CUDA, [p] { cudaFree(p); });
  tensor_ = Tensor::wrap(storage_, front_bytes_, shape, dtype);
}

bool GuardedDevice::guards_intact() const {
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  const char* base = static_cast<const char*>(storage_->data());
  const std::pair<size_t, size_t> bands[] = {{0, front_bytes_}, {front_bytes_ + tensor_.nbytes(), kGuardBytes}};
  for (auto [offset, size] : bands) {
    std::vector<unsigned char> band(size);
    check(cudaMemcpy(band.data(), base + offset, size, cudaMemcpyDeviceToHost), "cudaMemcpy");
    for (unsigned char b : band)
      if (b != kGuardPattern) return false;
  }
  return true;
}

Tensor round_bf16(const Tensor& host_f32) { return convert_dtype(convert_dtype(host_f32, DType::BF16), DType::F32); }

namespace {
Tensor host_in_dtype(const Tensor& host, DType dtype) {
  if (host.dtype() == dtype) return host;
  return convert_dtype(host, dtype);
}
}  // namespace

Tensor to_device(const Tensor& host, DType dtype) {
  Tensor h = host_in_dtype(host, dtype);
  Tensor d = Tensor::empty(h.shape(), dtype, *gpu_ctx().allocator);
  check(cudaMemcpy(d.data(), h.data(), h.nbytes(), cudaMemcpyHostToDevice), "cudaMemcpy H2D");
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  return d;
}

std::unique_ptr<GuardedDevice> to_guarded_device(const Tensor& host, DType dtype, size_t misalign_bytes) {
  Tensor h = host_in_dtype(host, dtype);
  auto g = std::make_unique<GuardedDevice>(h.shape(), dtype, misalign_bytes);
  check(cudaMemcpy(g->tensor().data(), h.data(), h.nbytes(), cudaMemcpyHostToDevice), "cudaMemcpy H2D");
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  return g;
}

std::unique_ptr<GuardedDevice> poisoned_output(const Shape& shape, DType dtype, size_t misalign_bytes) {
  auto g = std::make_unique<GuardedDevice>(shape, dtype, misalign_bytes);
  Tensor h = Tensor::empty(shape, dtype);
  if (dtype == DType::F32) for (int64_t i = 0; i < h.numel(); ++i) h.data_as<float>()[i] = NAN;
  else if (dtype == DType::BF16) for (int64_t i = 0; i < h.numel(); ++i) h.data_as<uint16_t>()[i] = 0x7fc0;
  else std::memset(h.data(), 0x7f, h.nbytes());
  check(cudaMemcpy(g->tensor().data(), h.data(), h.nbytes(), cudaMemcpyHostToDevice), "cudaMemcpy H2D");
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  return g;
}

Tensor to_host(const Tensor& device) {
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  Tensor h = Tensor::empty(device.shape(), device.dtype());
  check(cudaMemcpy(h.data(), device.data(), device.nbytes(), cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
  return h;
}

Tensor to_host_f32(const Tensor& device) {
  Tensor h = to_host(device);
  if (h.dtype() == DType::BF16 || h.dtype() == DType::F64) return convert_dtype(h, DType::F32);
  return h;
}

double expect_close(const std::string& what, const Tensor& got, const Tensor& ref, double tol) {
  const double err = rel_l2(got, ref);
  EXPECT_LE(err, tol) << what << ": relative L2 error " << err << " (tolerance " << tol << ")";
  return err;
}

int64_t far_elements(const Tensor& got, const Tensor& ref, double fraction) {
  const float* g = got.data_as<float>();
  const float* r = ref.data_as<float>();
  double sq = 0;
  for (int64_t i = 0; i < ref.numel(); ++i) sq += double(r[i]) * r[i];
  const double limit = fraction * std::sqrt(sq / std::max<int64_t>(ref.numel(), 1));
  int64_t far = 0;
  for (int64_t i = 0; i < ref.numel(); ++i) far += !(std::abs(double(g[i]) - r[i]) <= limit);
  return far;
}

double expect_device_close(const std::string& what, const Tensor& device, const Tensor& ref, double tol) {
  const double err = expect_close(what, to_host_f32(device), ref, tol);
  std::printf("  %-64s rel L2 %.3g (tol %.0e)\n", what.c_str(), err, tol);
  return err;
}

void inputs_ready() { ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << "inputs did not reach the GPU"; }

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.numel() == b.numel() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

Tensor host_counts(const std::vector<int64_t>& counts) {
  Tensor t = Tensor::empty({static_cast<int64_t>(counts.size())}, DType::I64);
  for (size_t e = 0; e < counts.size(); ++e) t.data_as<int64_t>()[e] = counts[e];
  return t;
}

}  // namespace quill::test
