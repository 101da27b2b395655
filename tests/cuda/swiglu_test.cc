// CUDA SwiGLU (src/ops/cuda/swiglu.cu) against the CPU reference, on the split [gate | up] layout.
// Inputs are rounded through bf16 first; outputs are poisoned inside guard bands. The backward is also
// run in place (dh aliasing h), which the op allows.
// Legend: N rows, F intermediate width.
#include "ops/swiglu.h"

#include <gtest/gtest.h>

#include <functional>
#include <ostream>
#include <string>

#include "base/error.h"
#include "cuda/harness.h"
#include "util/test_util.h"

namespace quill {
namespace {

using test::expect_close;
using test::poisoned_output;
using test::random_tensor;
using test::round_bf16;
using test::to_device;
using test::to_guarded_device;
using test::to_host_f32;

using test::expect_error;

struct Case {
  int64_t N, F;
};

void PrintTo(const Case& c, std::ostream* os) { *os << "N" << c.N << "_F" << c.F; }

class CudaSwigluTest : public ::testing::TestWithParam<Case> {};

TEST_P(CudaSwigluTest, ForwardMatchesCpu) {
  QUILL_REQUIRE_GPU();
  const Case c = GetParam();
  const Tensor h = round_bf16(random_tensor({c.N, 2 * c.F}, DType::F32, 801, 2.0));
  Tensor a_ref = Tensor::empty({c.N, c.F}, DType::F32);
  ops::swiglu_forward(DeviceContext::cpu(), h, a_ref);
  auto a = poisoned_output({c.N, c.F}, DType::BF16);
  ops::swiglu_forward(test::gpu_ctx(), to_device(h, DType::BF16), a->tensor());
  expect_close("a", to_host_f32(a->tensor()), a_ref, 1e-2);
  EXPECT_TRUE(a->guards_intact()) << "a written outside its bounds";
}

TEST_P(CudaSwigluTest, BackwardMatchesCpu) {
  QUILL_REQUIRE_GPU();
  const Case c = GetParam();
  const Tensor h = round_bf16(random_tensor({c.N, 2 * c.F}, DType::F32, 901, 2.0));
  const Tensor da = round_bf16(random_tensor({c.N, c.F}, DType::F32, 902));
  Tensor dh_ref = Tensor::empty({c.N, 2 * c.F}, DType::F32);
  ops::swiglu_backward(DeviceContext::cpu(), h, da, dh_ref);

  const Tensor d_h = to_device(h, DType::BF16), d_da = to_device(da, DType::BF16);
  auto dh = poisoned_output({c.N, 2 * c.F}, DType::BF16);
  ops::swiglu_backward(test::gpu_ctx(), d_h, d_da, dh->tensor());
  expect_close("dh", to_host_f32(dh->tensor()), dh_ref, 1e-2);
  EXPECT_TRUE(dh->guards_intact()) << "dh written outside its bounds";

  auto in_place = to_guarded_device(h, DType::BF16);
  ops::swiglu_backward(test::gpu_ctx(), in_place->tensor(), d_da, in_place->tensor());
  expect_close("dh (in place)", to_host_f32(in_place->tensor()), dh_ref, 1e-2);
  EXPECT_TRUE(in_place->guards_intact()) << "dh (in place) written outside its bounds";
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaSwigluTest,
                         ::testing::Values(Case{129, 333}, Case{1, 7}, Case{64, 1024}, Case{3001, 40}));

TEST(CudaSwiglu, WrongShapesAndDtypesNameTheTensor) {
  QUILL_REQUIRE_GPU();
  const Tensor h = to_device(random_tensor({4, 10}, DType::F32, 1001), DType::BF16);
  auto a_wide = poisoned_output({4, 10}, DType::BF16);
  expect_error([&] { ops::swiglu_forward(test::gpu_ctx(), h, a_wide->tensor()); }, "swiglu_forward: a has shape");
  auto a_f32 = poisoned_output({4, 5}, DType::F32);
  expect_error([&] { ops::swiglu_forward(test::gpu_ctx(), h, a_f32->tensor()); },
               "swiglu_forward: a has dtype F32, expected BF16");
  const Tensor odd = to_device(random_tensor({4, 9}, DType::F32, 1002), DType::BF16);
  auto a = poisoned_output({4, 4}, DType::BF16);
  expect_error([&] { ops::swiglu_forward(test::gpu_ctx(), odd, a->tensor()); }, "swiglu_forward: h must be 2-D [N, 2F]");
}

}  // namespace
}  // namespace quill
