// The memory plan's FP8 term (plan/param_memory.h): with --fp8-recipe blockwise each FP8 matrix's
// quantised copy adds its codes (twice on a GPU: the transposed codes) and one fp32 scale per 128x128
// block (twice on a GPU, rows padded to 4 floats) to the resident compute weights, on every stage of a layout; nothing without FP8.
// On a GPU the FP8 matrices' bf16 copies count in the optimizer phase only.
#include <gtest/gtest.h>

#include <algorithm>

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
    int64_t want = 0, fp8_elements = 0;
    for (const quill::ParamDecl& d : quill::param_decls(c))
      if (quill::runs_in_fp8(d.name)) {
        want += quill::ops::fp8_weight_copy_bytes(d.shape, device);
        fp8_elements += quill::shape_numel(d.shape);
      }
    ASSERT_GT(want, 0);
    quill::plan::PlanRequest q;
    q.config = c;
    q.row_tokens = 64;
    q.device = device;
    const quill::plan::StagePlan plain = quill::plan::plan_memory(q).stages.at(0);
    q.fp8 = true;
    const quill::plan::StagePlan fp8 = quill::plan::plan_memory(q).stages.at(0);
    // On a GPU the FP8 matrices' bf16 copies leave the resident weights for the optimizer phase
    // (model/transient_compute.h); on the CPU their fp32 compute copy is the master and stays.
    const int64_t transient = device == quill::Device::CUDA ? 2 * fp8_elements : 0;
    EXPECT_EQ(fp8.compute_weights - plain.compute_weights, want - transient) << quill::device_name(device);
    EXPECT_EQ(fp8.transient_compute, transient) << quill::device_name(device);
    EXPECT_EQ(plain.transient_compute, 0);
    EXPECT_EQ(fp8.allocator_peak(), fp8.resident() + std::max(fp8.dynamic_peak(), transient));
  }
}

}  // namespace
