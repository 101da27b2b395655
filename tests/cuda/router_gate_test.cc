// The router's gate GEMMs on the GPU (src/ops/cuda/router_gate.cu: a bf16 activation's forward and weight gradient as
// exact bf16 parts of the fp32 operand on the tensor cores, over chunks of the contraction; the input gradient and an
// fp32 activation's GEMMs in cuBLASLt fp32) against the CPU reference computed in double: forward logits, the input
// gradient (fp32 and bf16), the weight gradient written and added; nothing written outside the outputs, the same
// bits twice. Within 1e-6 relative L2 of double, fp32's class: cuBLASLt's fp32 GEMMs measured at most 4.7e-7 on these
// shapes, the parts 6.5e-7, and the parts over one unchunked 4,096-long contraction 4.4e-6 (the tensor cores' fp32
// accumulation: bench/results/2026-12-06-h100-router-gemm/, 2026-12-06-h100-router-chunks-overlap/,
// docs/decisions/router-gemm-bf16x3.md); bf16 operands would be ~2e-3.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "cuda/harness.h"
#include "ops/convert.h"
#include "ops/router.h"
#include "util/test_util.h"

namespace quill {
namespace {

using test::poisoned_output;
using test::round_bf16;
using test::to_device;
using test::to_host;

const DeviceContext kCpu = DeviceContext::cpu();
constexpr double kTol = 1e-6;
constexpr double kTolBf16Output = 4e-3;

Tensor as_f64(const Tensor& t) {
  Tensor out = Tensor::empty(t.shape(), DType::F64);
  ops::convert(kCpu, t, out);
  return out;
}
Tensor as_f32(const Tensor& t) {
  Tensor out = Tensor::empty(t.shape(), DType::F32);
  ops::convert(kCpu, t, out);
  return out;
}

// One problem: x [T, D] (bf16 values, as the model's activations), w [X, D] and dlogits [T, X] fp32 with a wide
// spread of magnitudes (rows scaled by 1e-3 .. 1e3), dw0 the gradient added to.
void check_gate(DType x_dtype, int64_t T, int64_t D, int64_t X, uint64_t seed) {
  const std::string tag = std::string("router gate x ") + dtype_name(x_dtype) + " T=" + std::to_string(T) +
                          " D=" + std::to_string(D) + " X=" + std::to_string(X);
  SCOPED_TRACE(tag);
  const Tensor x = round_bf16(test::random_tensor({T, D}, DType::F32, seed));
  Tensor w = test::random_tensor({X, D}, DType::F32, seed + 1, 0.02);
  Tensor dl = test::random_tensor({T, X}, DType::F32, seed + 2);
  const float scales[] = {1e-3f, 1.f, 1e3f, 0.37f};
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < X; ++i) dl.data_as<float>()[t * X + i] *= scales[(t + i) % 4];
  const Tensor dw0 = test::random_tensor({X, D}, DType::F32, seed + 3);

  // The reference, in double.
  Tensor logits_ref = Tensor::empty({T, X}, DType::F64), dx_ref = Tensor::empty({T, D}, DType::F64);
  Tensor dw_ref = Tensor::empty({X, D}, DType::F64), dw_acc_ref = as_f64(dw0);
  ops::router_gate_forward(kCpu, as_f64(x), as_f64(w), logits_ref);
  ops::router_gate_backward_input(kCpu, as_f64(dl), as_f64(w), dx_ref);
  ops::router_gate_backward_weight(kCpu, as_f64(dl), as_f64(x), dw_ref, false);
  ops::router_gate_backward_weight(kCpu, as_f64(dl), as_f64(x), dw_acc_ref, true);

  const DeviceContext ctx = test::gpu_ctx();
  const Tensor xd = to_device(x, x_dtype), wd = to_device(w, DType::F32), dld = to_device(dl, DType::F32);
  Tensor first[4];
  for (int run = 0; run < 2; ++run) {
    auto logits = poisoned_output({T, X}, DType::F32);
    auto dx32 = poisoned_output({T, D}, DType::F32);
    auto dx16 = poisoned_output({T, D}, DType::BF16);
    auto dw = poisoned_output({X, D}, DType::F32);
    const Tensor dw_acc = to_device(dw0, DType::F32);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ops::router_gate_forward(ctx, xd, wd, logits->tensor());
    ops::router_gate_backward_input(ctx, dld, wd, dx32->tensor());
    ops::router_gate_backward_input(ctx, dld, wd, dx16->tensor());
    ops::router_gate_backward_weight(ctx, dld, xd, dw->tensor(), false);
    ops::router_gate_backward_weight(ctx, dld, xd, dw_acc, true);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    if (run == 0) {
      test::expect_device_close(tag + " logits", logits->tensor(), as_f32(logits_ref), kTol);
      test::expect_device_close(tag + " dx fp32", dx32->tensor(), as_f32(dx_ref), kTol);
      test::expect_device_close(tag + " dx bf16", dx16->tensor(), as_f32(dx_ref), kTolBf16Output);
      test::expect_device_close(tag + " dw written", dw->tensor(), as_f32(dw_ref), kTol);
      test::expect_device_close(tag + " dw added", dw_acc, as_f32(dw_acc_ref), kTol);
    }
    EXPECT_TRUE(logits->guards_intact()) << "router_gate_forward wrote outside the logits";
    EXPECT_TRUE(dx32->guards_intact() && dx16->guards_intact()) << "router_gate_backward_input wrote outside dx";
    EXPECT_TRUE(dw->guards_intact()) << "router_gate_backward_weight wrote outside dw";
    const Tensor results[4] = {to_host(logits->tensor()), to_host(dx32->tensor()), to_host(dx16->tensor()),
                               to_host(dw_acc)};
    for (int i = 0; i < 4; ++i) {
      if (run == 0) first[i] = results[i];
      else EXPECT_TRUE(test::same_bits(first[i], results[i])) << "two runs differ in result " << i;
    }
  }
}

TEST(RouterGateCuda, MatchesTheReference) {
  QUILL_REQUIRE_GPU();
  for (DType x : {DType::BF16, DType::F32}) {
    check_gate(x, 300, 512, 258, 7);    // X not a multiple of 8: padded parts
    check_gate(x, 5, 64, 3, 17);        // smaller than every tile
    check_gate(x, 700, 1000, 258, 37);  // contractions cut into chunks of 512 and a shorter last one
    check_gate(x, 2048, 4096, 258, 27);  // a seed rank: 2,048 positions, 256 + 2 logits
  }
}

}  // namespace
}  // namespace quill
