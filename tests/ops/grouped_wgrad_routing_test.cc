// --grouped-wgrad-kernel's routing (grouped_wgrad::by_wgmma, src/ops/cuda/grouped_wgrad_wg.h) without a GPU: the rule
// the measurement chose (the kernel when accumulating at a seed rank's rows per expert, and over two micro-batches'
// rows up to twice that; cuBLASLt for a step's first write and for the slice's larger groups), and a forced choice
// winning either way.
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
  // Two micro-batches' rows (the kernel reads both in place; cuBLASLt would need them merged).
  EXPECT_TRUE(by_wgmma(GroupedGemmKernel::kAuto, true, 32 * 768, 32, /*two_sources=*/true));
  EXPECT_TRUE(by_wgmma(GroupedGemmKernel::kAuto, true, 32 * kAutoMeanRowsTwoSources, 32, true));
  EXPECT_FALSE(by_wgmma(GroupedGemmKernel::kAuto, true, 32 * kAutoMeanRowsTwoSources + 1, 32, true));
  EXPECT_FALSE(by_wgmma(GroupedGemmKernel::kAuto, false, 32 * 768, 32, true));
  for (bool accumulate : {false, true})
    for (bool two : {false, true}) {
      EXPECT_TRUE(by_wgmma(GroupedGemmKernel::kWgmma, accumulate, 32 * 4096, 32, two));
      EXPECT_FALSE(by_wgmma(GroupedGemmKernel::kCublasLt, accumulate, 32 * 16, 32, two));
    }
}

}  // namespace
}  // namespace quill::cuda::grouped_wgrad
