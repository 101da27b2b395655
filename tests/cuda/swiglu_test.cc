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

// shift: every tensor starts that many bytes past a 16-byte boundary (a row view), which sends F % 8 == 0
// to the scalar path too.
struct Case {
  int64_t N, F;
  size_t shift = 0;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << "N" << c.N << "_F" << c.F;
  if (c.shift) *os << "_misaligned" << c.shift;
}

class CudaSwigluTest : public ::testing::TestWithParam<Case> {};

TEST_P(CudaSwigluTest, ForwardMatchesCpu) {
  QUILL_REQUIRE_GPU();
  const Case c = GetParam();
  const Tensor h = round_bf16(random_tensor({c.N, 2 * c.F}, DType::F32, 801, 2.0));
  Tensor a_ref = Tensor::empty({c.N, c.F}, DType::F32);
  ops::swiglu_forward(DeviceContext::cpu(), h, a_ref);
  auto a = poisoned_output({c.N, c.F}, DType::BF16, c.shift);
  auto d_h = to_guarded_device(h, DType::BF16, c.shift);
  ops::swiglu_forward(test::gpu_ctx(), d_h->tensor(), a->tensor());
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

  auto d_h = to_guarded_device(h, DType::BF16, c.shift);
  auto d_da = to_guarded_device(da, DType::BF16, c.shift);
  auto dh = poisoned_output({c.N, 2 * c.F}, DType::BF16, c.shift);
  ops::swiglu_backward(test::gpu_ctx(), d_h->tensor(), d_da->tensor(), dh->tensor());
  expect_close("dh", to_host_f32(dh->tensor()), dh_ref, 1e-2);
  EXPECT_TRUE(dh->guards_intact()) << "dh written outside its bounds";

  auto in_place = to_guarded_device(h, DType::BF16, c.shift);
  ops::swiglu_backward(test::gpu_ctx(), in_place->tensor(), d_da->tensor(), in_place->tensor());
  expect_close("dh (in place)", to_host_f32(in_place->tensor()), dh_ref, 1e-2);
  EXPECT_TRUE(in_place->guards_intact()) << "dh (in place) written outside its bounds";
}

// The kernel paths (src/ops/cuda/swiglu.cu): F % 8 == 0 with aligned tensors takes units of 8 columns
// (16-byte accesses), anything else units of 1. A grid of one resident wave walks the units two per
// trip; the large cases take more than one trip per thread, with a stride that is not a multiple of
// the row (the row/column stepping wraps).
INSTANTIATE_TEST_SUITE_P(Shapes, CudaSwigluTest,
                         ::testing::Values(Case{129, 333},        // scalar
                                           Case{1, 7},            // scalar, one row
                                           Case{64, 1024},        // vector
                                           Case{3001, 40},        // vector, 5 units per row
                                           Case{100, 2048},       // vector, the routed experts' F
                                           Case{9, 8},            // vector, one unit per row
                                           Case{33, 20},          // scalar: F % 8 == 4
                                           Case{3000, 1000},      // vector, several trips per thread
                                           Case{2000, 333},       // scalar, several trips per thread
                                           Case{50, 64, 2},       // F % 8 == 0 but misaligned: scalar
                                           Case{70, 2048, 6}));   // misaligned at the experts' F

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
