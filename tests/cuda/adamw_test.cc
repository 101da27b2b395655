// The CUDA AdamW update (src/ops/cuda/adamw.cu) against the CPU reference over three steps
// (bias corrections of steps 1, 2, 3; new gradients each step; weight decay and clipping on).
// fp32 state (value, exp_avg, exp_avg_sq) within 1e-6 relative L2 (the kernel uses explicitly
// rounded fp32 operations in the reference's order, so it is usually bit-exact); the bf16 compute
// copy within 1e-2 of the reference value. Compute copies: bf16, fp32, none, and the value itself.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "base/error.h"
#include "cuda/harness.h"
#include "ops/adamw.h"
#include "util/test_util.h"

namespace quill {
namespace {

using test::inputs_ready;
using test::GuardedDevice;
using test::gpu_ctx;

const DeviceContext kCpu = DeviceContext::cpu();

// A guarded device copy of host fp32 `t`, starting `offset` elements into its buffer.
struct Placed {
  std::unique_ptr<GuardedDevice> buffer;
  Tensor view;
};
Placed place(const Tensor& host, DType d, int64_t offset) {
  const int64_t n = host.numel();
  Tensor hb = Tensor::zeros({n + offset}, DType::F32);
  std::memcpy(hb.data_as<float>() + offset, host.data(), host.nbytes());
  Placed p;
  p.buffer = test::to_guarded_device(hb, d);
  p.view = p.buffer->tensor().rows(offset, n + offset).reshape(host.shape());
  return p;
}
Placed place_poisoned(const Shape& shape, DType d, int64_t offset) {
  const int64_t n = shape_numel(shape);
  Placed p;
  p.buffer = test::poisoned_output({n + offset}, d);
  p.view = p.buffer->tensor().rows(offset, n + offset).reshape(shape);
  return p;
}

enum class Compute { Bf16, F32, None, Alias };
const char* compute_name(Compute c) {
  switch (c) {
    case Compute::Bf16: return "bf16 compute";
    case Compute::F32: return "fp32 compute";
    case Compute::None: return "no compute";
    default: return "compute = value";
  }
}

void check_adamw(const Shape& shape, Compute mode, int64_t offset, uint64_t seed) {
  const std::string tag = std::string("adamw ") + shape_str(shape) + " " + compute_name(mode) +
                          (offset ? " (offset views)" : " (aligned)");
  SCOPED_TRACE(tag);
  std::printf("%s\n", tag.c_str());
  // Weights of order 1 with a few exact zeros, moments from zero as in training's first step.
  Tensor w_ref = test::random_tensor(shape, DType::F32, seed);
  for (int64_t i = 0; i < w_ref.numel(); i += 97) w_ref.data_as<float>()[i] = 0.0f;
  Tensor m_ref = Tensor::zeros(shape, DType::F32), v_ref = Tensor::zeros(shape, DType::F32);

  const DeviceContext ctx = gpu_ctx();
  Placed w = place(w_ref, DType::F32, offset), m = place(m_ref, DType::F32, offset), v = place(v_ref, DType::F32, offset);
  Placed compute;
  if (mode == Compute::Bf16) compute = place_poisoned(shape, DType::BF16, offset);
  if (mode == Compute::F32) compute = place_poisoned(shape, DType::F32, offset);
  const Tensor compute_t = mode == Compute::Alias ? w.view : (compute.buffer ? compute.view : Tensor());

  ops::AdamWStep s;
  s.lr = 3e-2f;
  s.beta1 = 0.9f;
  s.beta2 = 0.95f;
  s.eps = 1e-8f;
  s.weight_decay = 0.1f;
  s.clip = 0.8f;
  for (int step = 1; step <= 3; ++step) {
    s.bias_correction1 = 1.0 - std::pow(static_cast<double>(s.beta1), step);
    s.bias_correction2 = 1.0 - std::pow(static_cast<double>(s.beta2), step);
    // Gradients of varied scale, with some exact zeros (v stays small there: eps matters).
    Tensor g = test::random_tensor(shape, DType::F32, seed + 10 * step, step == 2 ? 1e-3 : 1.0);
    for (int64_t i = 5; i < g.numel(); i += 101) g.data_as<float>()[i] = 0.0f;
    ops::adamw_update(kCpu, w_ref, g, m_ref, v_ref, Tensor(), s);
    Placed gd = place(g, DType::F32, offset);
    inputs_ready();
    ops::adamw_update(ctx, w.view, gd.view, m.view, v.view, compute_t, s);
    const std::string at = tag + " step " + std::to_string(step);
    test::expect_device_close(at + " value", w.view, w_ref, 1e-6);
    test::expect_device_close(at + " exp_avg", m.view, m_ref, 1e-6);
    test::expect_device_close(at + " exp_avg_sq", v.view, v_ref, 1e-6);
    if (mode == Compute::Bf16) test::expect_device_close(at + " compute (bf16 of value)", compute.view, w_ref, 1e-2);
    if (mode == Compute::F32) test::expect_device_close(at + " compute (fp32 copy of value)", compute.view, w_ref, 1e-6);
    EXPECT_TRUE(gd.buffer->guards_intact()) << at << ": grad buffer written outside";
  }
  EXPECT_TRUE(w.buffer->guards_intact()) << tag << ": value written outside its buffer";
  EXPECT_TRUE(m.buffer->guards_intact()) << tag << ": exp_avg written outside its buffer";
  EXPECT_TRUE(v.buffer->guards_intact()) << tag << ": exp_avg_sq written outside its buffer";
  if (compute.buffer) {
    EXPECT_TRUE(compute.buffer->guards_intact()) << tag << ": compute written outside its buffer";
  }
  if (mode == Compute::Bf16) {
    // The bf16 copy is the value rounded to nearest even: exact against the GPU's own value.
    const Tensor got = test::to_host(compute.view), value = test::to_host(w.view);
    int64_t differ = 0;
    for (int64_t i = 0; i < value.numel(); ++i)
      differ += got.data_as<uint16_t>()[i] != f32_to_bf16(value.data_as<float>()[i]);
    EXPECT_EQ(differ, 0) << tag << ": bf16 compute differs from round-to-nearest-even(value) in " << differ
                         << " elements";
  }
}

TEST(AdamWCuda, ThreeStepsMatchCpu) {
  QUILL_REQUIRE_GPU();
  for (Compute mode : {Compute::Bf16, Compute::F32, Compute::None, Compute::Alias})
    for (int64_t offset : {0, 1}) check_adamw({37, 131}, mode, offset, 1000);
  check_adamw({1031, 1100}, Compute::Bf16, 0, 2000);  // more elements than one pass of the grid
  check_adamw({7}, Compute::Bf16, 0, 3000);
}

TEST(AdamWCuda, WrongDtypesThrow) {
  QUILL_REQUIRE_GPU();
  const DeviceContext ctx = gpu_ctx();
  const Tensor h = test::random_tensor({5, 4}, DType::F32, 1);
  const Tensor w = test::to_device(h, DType::F32), g = test::to_device(h, DType::F32);
  const Tensor m = test::to_device(h, DType::F32), v = test::to_device(h, DType::F32);
  const Tensor g_bf16 = test::to_device(h, DType::BF16), c_f64 = test::to_device(h, DType::F64);
  const Tensor m_other = test::to_device(test::random_tensor({4, 5}, DType::F32, 2), DType::F32);
  inputs_ready();
  ops::AdamWStep s;
  s.lr = 1e-3f;
  auto expect_error = [](auto&& fn, const std::string& needle) {
    try {
      fn();
      ADD_FAILURE() << "expected a quill::Error containing '" << needle << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "message: " << e.what();
    }
  };
  expect_error([&] { ops::adamw_update(ctx, w, g_bf16, m, v, Tensor(), s); },
               "adamw_update: grad has dtype BF16, expected F32");
  expect_error([&] { ops::adamw_update(ctx, w, g, m_other, v, Tensor(), s); },
               "adamw_update: exp_avg has shape [4, 5], expected [5, 4]");
  expect_error([&] { ops::adamw_update(ctx, w, g, m, v, c_f64, s); },
               "adamw_update: compute has dtype F64, expected BF16 or F32");
  expect_error([&] { ops::adamw_update(ctx, h, g, m, v, Tensor(), s); }, "adamw_update: value must be a CUDA tensor");
}

}  // namespace
}  // namespace quill
