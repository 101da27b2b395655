// The router's gate GEMMs on the CPU (src/ops/cpu/router_gate.cc: the linear ops in the gate's dtype, other
// activations widened first) and the exact bf16 split the GPU's gate GEMMs run on
// (src/ops/cuda/bf16x3.h): three bf16 parts that sum to the fp32 value exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>

#include "ops/convert.h"
#include "ops/cuda/bf16x3.h"
#include "ops/linear.h"
#include "ops/router.h"
#include "ops/router_gate_layout.h"
#include "tensor/dtype.h"
#include "util/test_util.h"

namespace quill {
namespace {

const DeviceContext kCpu = DeviceContext::cpu();

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() && a.dtype() == b.dtype() &&
         std::memcmp(a.data(), b.data(), a.numel() * dtype_size(a.dtype())) == 0;
}

TEST(Bf16x3Split, PartsAreBf16AndSumExactly) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<uint32_t> mantissa(0, (1u << 23) - 1);
  std::uniform_int_distribution<int> exponent(127 - 100, 127 + 100);
  for (int i = 0; i < 200000; ++i) {
    const uint32_t sign = (i & 1) ? 0x80000000u : 0u;
    const float v = bf16x3::float_of(sign | (static_cast<uint32_t>(exponent(rng)) << 23) | mantissa(rng));
    const bf16x3::Parts p = bf16x3::split(v);
    for (float part : {p.hi, p.mid, p.lo}) ASSERT_EQ(bf16x3::bits_of(part) & 0xffffu, 0u) << v;
    ASSERT_EQ(static_cast<double>(p.hi) + static_cast<double>(p.mid) + static_cast<double>(p.lo),
              static_cast<double>(v))
        << "bits " << bf16x3::bits_of(v);
    // The high part is the bf16 conversion quill uses everywhere else (round to nearest even).
    ASSERT_EQ(bf16x3::bf16_bits(p.hi), f32_to_bf16(v));
    ASSERT_EQ(bf16x3::part_bits(v, 1), bf16x3::bf16_bits(p.mid));
  }
}

TEST(Bf16x3Split, TiesAndSpecialValues) {
  // 1 + 2^-8 lies halfway between two bf16 values: ties to even (1), the rest in the middle part.
  const bf16x3::Parts tie = bf16x3::split(1.0f + 0x1p-8f);
  EXPECT_EQ(tie.hi, 1.0f);
  EXPECT_EQ(tie.mid, 0x1p-8f);
  EXPECT_EQ(tie.lo, 0.0f);
  const bf16x3::Parts zero = bf16x3::split(-0.0f);
  EXPECT_EQ(zero.hi + zero.mid + zero.lo, 0.0f);
  const float inf = std::numeric_limits<float>::infinity();
  const bf16x3::Parts pinf = bf16x3::split(-inf);
  EXPECT_EQ(pinf.hi, -inf);
  EXPECT_EQ(pinf.mid, 0.0f);
  EXPECT_EQ(pinf.lo, 0.0f);
  EXPECT_TRUE(std::isnan(bf16x3::split(std::numeric_limits<float>::quiet_NaN()).hi));
}

TEST(RouterGateLayout, ChunksPaddingAndWorkspaceAtASeedRank) {
  using namespace router_gate;
  EXPECT_EQ(chunks(0), 1);
  EXPECT_EQ(chunks(512), 1);
  EXPECT_EQ(chunks(513), 2);
  EXPECT_EQ(chunks(4096), 8);
  EXPECT_EQ(padded(258), 264);
  EXPECT_EQ(padded(3), 8);
  // T 2,048 positions, D 4,096, 256 + 2 logits: parts [792, 4,096] bf16 and the output [2,048, 792] fp32 the 8
  // chunks add into; parts [2,048, 792] bf16 and the output [792, 4,096] fp32 the 4 chunks add into; the input
  // gradient's fp32 [2,048, 4,096].
  EXPECT_EQ(workspace_bytes(Op::kForward, 2048, 4096, 258), 792 * 4096 * 2 + 2048 * 792 * 4);
  EXPECT_EQ(workspace_bytes(Op::kBackwardWeight, 2048, 4096, 258), 2048 * 792 * 2 + 792 * 4096 * 4);
  EXPECT_EQ(workspace_bytes(Op::kBackwardInput, 2048, 4096, 258), 2048 * 4096 * 4);
}

TEST(RouterGate, IsTheLinearOpsInTheGatesDtype) {
  const int64_t T = 13, D = 24, X = 7;
  const Tensor x = test::random_tensor({T, D}, DType::F32, 1), w = test::random_tensor({X, D}, DType::F32, 2);
  const Tensor dl = test::random_tensor({T, X}, DType::F32, 3);
  Tensor a = Tensor::empty({T, X}, DType::F32), b = Tensor::empty({T, X}, DType::F32);
  ops::router_gate_forward(kCpu, x, w, a);
  ops::linear_forward(kCpu, x, w, b);
  EXPECT_TRUE(same_bits(a, b));
  Tensor dxa = Tensor::empty({T, D}, DType::F32), dxb = Tensor::empty({T, D}, DType::F32);
  ops::router_gate_backward_input(kCpu, dl, w, dxa);
  ops::linear_backward_input(kCpu, dl, w, dxb);
  EXPECT_TRUE(same_bits(dxa, dxb));
  Tensor dwa = test::random_tensor({X, D}, DType::F32, 4), dwb = Tensor::empty({X, D}, DType::F32);
  std::memcpy(dwb.data(), dwa.data(), dwa.numel() * 4);
  ops::router_gate_backward_weight(kCpu, dl, x, dwa, true);
  ops::linear_backward_weight(kCpu, dl, x, dwb, true);
  EXPECT_TRUE(same_bits(dwa, dwb));
}

TEST(RouterGate, WidensBf16InputsAndRoundsABf16Gradient) {
  const int64_t T = 9, D = 16, X = 5;
  const Tensor x32 = test::random_tensor({T, D}, DType::F32, 6), w = test::random_tensor({X, D}, DType::F32, 7);
  Tensor x16 = Tensor::empty({T, D}, DType::BF16), xr = Tensor::empty({T, D}, DType::F32);
  ops::convert(kCpu, x32, x16);
  ops::convert(kCpu, x16, xr);
  Tensor a = Tensor::empty({T, X}, DType::F32), b = Tensor::empty({T, X}, DType::F32);
  ops::router_gate_forward(kCpu, x16, w, a);
  ops::linear_forward(kCpu, xr, w, b);
  EXPECT_TRUE(same_bits(a, b));
  const Tensor dl = test::random_tensor({T, X}, DType::F32, 8);
  Tensor dx16 = Tensor::empty({T, D}, DType::BF16), dx32 = Tensor::empty({T, D}, DType::F32);
  Tensor dx_rounded = Tensor::empty({T, D}, DType::BF16);
  ops::router_gate_backward_input(kCpu, dl, w, dx16);
  ops::linear_backward_input(kCpu, dl, w, dx32);
  ops::convert(kCpu, dx32, dx_rounded);
  EXPECT_TRUE(same_bits(dx16, dx_rounded));
}

TEST(RouterGate, RefusesAGateThatIsNotFloat) {
  const Tensor x = test::random_tensor({4, 8}, DType::F32, 1);
  Tensor w16 = Tensor::empty({3, 8}, DType::BF16), y = Tensor::empty({4, 3}, DType::F32);
  try {
    ops::router_gate_forward(kCpu, x, w16, y);
    FAIL() << "a bf16 gate was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("router_gate_forward: w has dtype"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace quill
