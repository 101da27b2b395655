// GPU tests skip themselves on a machine without a GPU (CI), and run on the GPU machine.
#include <gtest/gtest.h>

#include "ops/cuda/cuda_context.h"

namespace quill {
namespace {

TEST(CudaContext, CreatesResourcesAndAllocatesDeviceMemory) {
  if (!cuda_device_available()) GTEST_SKIP() << "no GPU on this machine";
  CudaBackend backend(0);
  DeviceContext ctx = backend.context();
  EXPECT_EQ(ctx.device, Device::CUDA);
  Tensor t = Tensor::empty({1024, 3}, DType::BF16, *ctx.allocator);
  EXPECT_EQ(t.device(), Device::CUDA);
  backend.synchronize();
}

}  // namespace
}  // namespace quill
