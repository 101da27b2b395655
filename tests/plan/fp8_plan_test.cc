// The memory plan's FP8 term (plan/param_memory.h): with --fp8-recipe blockwise each FP8 matrix's
// quantised copy adds its codes (twice on a GPU: the transposed codes) and one fp32 scale per 128x128
// block (twice on a GPU, rows padded to 4 floats) to the resident compute weights, on every stage of a layout; nothing without FP8.
#include <gtest/gtest.h>

#include "model/config.h"
#include "model/fp8_params.h"
#include "model/params.h"
#include "ops/fp8.h"
#include "plan/memory_plan.h"
#include "plan/param_memory.h"

namespace {

TEST(Fp8Plan, QuantizedCopiesAddToTheComputeWeights) {
  const quill::InklingConfig c = quill::load_inkling_config(std::string(QUILL_SOURCE_DIR) + "/configs/tiny.json");
  EXPECT_EQ(quill::ops::fp8_weight_copy_bytes({130, 200}, quill::Device::CPU), 130 * 200 + 2 * 2 * 4);
  EXPECT_EQ(quill::ops::fp8_weight_copy_bytes({3, 130, 64}, quill::Device::CUDA),
            2 * 3 * 130 * 64 + (3 * 2 * 4 + 3 * 1 * 4) * 4);  // scale rows padded to 4 floats, both copies
  for (quill::Device device : {quill::Device::CPU, quill::Device::CUDA}) {
    int64_t want = 0;
    for (const quill::ParamDecl& d : quill::param_decls(c))
      if (quill::runs_in_fp8(d.name)) want += quill::ops::fp8_weight_copy_bytes(d.shape, device);
    ASSERT_GT(want, 0);
    quill::plan::PlanRequest q;
    q.config = c;
    q.row_tokens = 64;
    q.device = device;
    const int64_t plain = quill::plan::plan_memory(q).stages.at(0).compute_weights;
    q.fp8 = true;
    EXPECT_EQ(quill::plan::plan_memory(q).stages.at(0).compute_weights - plain, want);
  }
}

}  // namespace
