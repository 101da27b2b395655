// --grouped-wgrad-kernel's routing (grouped_wgrad::by_wgmma, src/ops/cuda/grouped_wgrad_wg.h) without a GPU: the
// rule the measurement chose (the kernel when accumulating at a seed rank's rows per expert; cuBLASLt for a step's
// first write and for the slice's larger groups), and a forced choice winning either way.
#include "ops/cuda/grouped_wgrad_wg.h"

#include <gtest/gtest.h>

namespace quill::cuda::grouped_wgrad {
namespace {

TEST(GroupedWgradRouting, AutoTakesTheKernelWhenAccumulatingSmallGroupsAsMeasured) {
  using quill::GroupedGemmKernel;
  EXPECT_TRUE(by_wgmma(GroupedGemmKernel::kAuto, /*accumulate=*/true, 32 * 384, 32));
  EXPECT_TRUE(by_wgmma(GroupedGemmKernel::kAuto, true, 32 * kAutoMeanRows, 32));
  EXPECT_FALSE(by_wgmma(GroupedGemmKernel::kAuto, true, 32 * kAutoMeanRows + 1, 32));
  EXPECT_FALSE(by_wgmma(GroupedGemmKernel::kAuto, true, 32 * 1536, 32));
  EXPECT_FALSE(by_wgmma(GroupedGemmKernel::kAuto, /*accumulate=*/false, 32 * 384, 32));
  for (bool accumulate : {false, true}) {
    EXPECT_TRUE(by_wgmma(GroupedGemmKernel::kWgmma, accumulate, 32 * 4096, 32));
    EXPECT_FALSE(by_wgmma(GroupedGemmKernel::kCublasLt, accumulate, 32 * 16, 32));
  }
}

}  // namespace
}  // namespace quill::cuda::grouped_wgrad
