// The attention's bias rows and their gradient on the GPU (src/ops/cuda/attention_tc_bias.cu), both paths of
// attn_bias::BiasRowsPath: cuBLASLt's fp32 GEMMs (the ops' path) and the memory-bound kernels for R <= 16 (the
// experiment), against the same sums in double on the host: rb = r . table (fp32, within 1e-6 relative L2) and
// dr = drb . table^T (bf16 as the ops store it, and fp32), on shapes with a partial last block of rows, an extent
// that is not a multiple of four, ranks below 16 and a rank above (which takes cuBLASLt on either path); nothing
// written outside the outputs, and the kernels' results the same bits twice.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cuda/harness.h"
#include "ops/cuda/attention_bias_rows.h"
#include "util/test_util.h"

namespace quill {
namespace {

using cuda::attn_bias::BiasRowsPath;
using test::poisoned_output;
using test::round_bf16;
using test::to_device;
using test::to_host;

struct Shape3 {
  int T, H, R, E;
};

std::string name_of(const Shape3& s, BiasRowsPath path) {
  return "T" + std::to_string(s.T) + " H" + std::to_string(s.H) + " R" + std::to_string(s.R) + " E" +
         std::to_string(s.E) + (path == BiasRowsPath::kKernels ? " kernels" : " cuBLASLt");
}

const std::vector<Shape3> kShapes = {
    {1000, 2, 16, 512},  // a TP4 rank's local layer in miniature; 2,000 rows: a partial last block of 64
    {300, 4, 16, 1024},  // a global layer's extent
    {37, 3, 16, 130},    // E not a multiple of four: scalar stores at the end of each row
    {64, 2, 5, 96},      // a rank below 16
    {130, 1, 1, 7},
    {50, 2, 20, 64},     // a rank above 16: cuBLASLt on either path
};

TEST(CudaAttentionBiasRows, BothPathsMatchTheSumsInDouble) {
  QUILL_REQUIRE_GPU();
  const DeviceContext ctx = test::gpu_ctx();
  uint64_t seed = 10;
  for (const Shape3& s : kShapes) {
    const int64_t rows = static_cast<int64_t>(s.T) * s.H;
    const Tensor r = round_bf16(test::random_tensor({s.T, s.H, s.R}, DType::F32, ++seed));
    const Tensor table = test::random_tensor({s.R, s.E}, DType::F32, ++seed, 0.3);
    const Tensor drb = test::random_tensor({s.T, s.H, s.E}, DType::F32, ++seed);
    // The sums in double, rounded to fp32 once.
    Tensor rb_ref = Tensor::empty({s.T, s.H, s.E}, DType::F32), dr_ref = Tensor::empty({s.T, s.H, s.R}, DType::F32);
    const float *rv = r.data_as<float>(), *tv = table.data_as<float>(), *gv = drb.data_as<float>();
    for (int64_t row = 0; row < rows; ++row) {
      for (int u = 0; u < s.E; ++u) {
        double acc = 0;
        for (int i = 0; i < s.R; ++i) acc += static_cast<double>(rv[row * s.R + i]) * tv[i * s.E + u];
        rb_ref.data_as<float>()[row * s.E + u] = static_cast<float>(acc);
      }
      for (int i = 0; i < s.R; ++i) {
        double acc = 0;
        for (int u = 0; u < s.E; ++u) acc += static_cast<double>(gv[row * s.E + u]) * tv[i * s.E + u];
        dr_ref.data_as<float>()[row * s.R + i] = static_cast<float>(acc);
      }
    }
    const Tensor r_d = to_device(r, DType::BF16), table_d = to_device(table, DType::F32);
    const Tensor drb_d = to_device(drb, DType::F32);
    for (BiasRowsPath path : {BiasRowsPath::kCublasLt, BiasRowsPath::kKernels}) {
      const std::string what = name_of(s, path);
      auto rb = poisoned_output({s.T, s.H, s.E}, DType::F32);
      auto dr16 = poisoned_output({s.T, s.H, s.R}, DType::BF16);
      auto dr32 = poisoned_output({s.T, s.H, s.R}, DType::F32);
      test::inputs_ready();
      cuda::attn_bias::bias_rows(ctx, s.T, s.H, s.R, s.E, r_d, table_d, rb->tensor(), path);
      for (const auto* dr : {&dr16, &dr32})
        cuda::attn_bias::bias_rows_backward(ctx, s.T, s.H, s.R, s.E, r_d, table_d, drb_d, (*dr)->tensor(), Tensor(),
                                            path);
      test::expect_device_close(what + " rb", rb->tensor(), rb_ref, 1e-6);
      test::expect_device_close(what + " dr (bf16)", dr16->tensor(), dr_ref, 4e-3);
      test::expect_device_close(what + " dr (fp32)", dr32->tensor(), dr_ref, 1e-6);
      EXPECT_TRUE(rb->guards_intact()) << what << ": rb written outside its bounds";
      EXPECT_TRUE(dr16->guards_intact() && dr32->guards_intact()) << what << ": dr written outside its bounds";
      if (path != BiasRowsPath::kKernels) continue;
      // The kernels' sums run in a fixed order: the same bits again.
      auto rb2 = poisoned_output({s.T, s.H, s.E}, DType::F32);
      auto dr2 = poisoned_output({s.T, s.H, s.R}, DType::F32);
      test::inputs_ready();
      cuda::attn_bias::bias_rows(ctx, s.T, s.H, s.R, s.E, r_d, table_d, rb2->tensor(), path);
      cuda::attn_bias::bias_rows_backward(ctx, s.T, s.H, s.R, s.E, r_d, table_d, drb_d, dr2->tensor(), Tensor(), path);
      EXPECT_TRUE(test::same_bits(to_host(rb->tensor()), to_host(rb2->tensor()))) << what << ": rb";
      EXPECT_TRUE(test::same_bits(to_host(dr32->tensor()), to_host(dr2->tensor()))) << what << ": dr";
    }
  }
}

}  // namespace
}  // namespace quill
