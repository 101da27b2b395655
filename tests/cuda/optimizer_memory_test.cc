// Optimizer memory on the GPU (skips without one): the CUDA AdamW kernel with bf16 moments against
// the CPU reference bit for bit, and CPU offload on a CUDA context (pinned host state, gradients
// copied down on the copy stream, the host AdamW, bf16 compute copies copied up) equal to the
// all-device update bit for bit, with and without --overlap-cpu-optimizer-d2h-h2d, fp32 and bf16
// compute buckets and fp32 and bf16 moments alike.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "cuda/harness.h"
#include "model/config.h"
#include "model/param_placement.h"
#include "ops/adamw.h"
#include "ops/convert.h"
#include "optim/adamw.h"

namespace quill {
namespace {

using test::gpu_ctx;

Tensor randoms(int64_t n, uint64_t seed, float lo, float hi) {
  Tensor t = Tensor::empty({n}, DType::F32);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 11;
  for (int64_t i = 0; i < n; ++i) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    t.data_as<float>()[i] = lo + (hi - lo) * static_cast<float>(s % 1000003) / 1000003.0f;
  }
  return t;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

TEST(CudaAdamWBf16Moments, BitForBitTheCpuReference) {
  QUILL_REQUIRE_GPU();
  const DeviceContext ctx = gpu_ctx(), cpu = DeviceContext::cpu();
  constexpr int64_t n = 100003;  // odd: the vector loop and the tail
  for (const auto& [md, vd] : {std::pair{DType::BF16, DType::BF16}, std::pair{DType::BF16, DType::F32},
                               std::pair{DType::F32, DType::BF16}}) {
    Tensor w = randoms(n, 1, -1, 1), m = Tensor::zeros({n}, md), v = Tensor::zeros({n}, vd);
    Tensor dw = Tensor::empty({n}, DType::F32, *ctx.allocator), dg = Tensor::empty({n}, DType::F32, *ctx.allocator);
    Tensor dm = Tensor::empty({n}, md, *ctx.allocator), dv = Tensor::empty({n}, vd, *ctx.allocator);
    Tensor dc = Tensor::empty({n}, DType::BF16, *ctx.allocator);
    ops::transfer(ctx, w, dw);
    ops::zero(ctx, dm);
    ops::zero(ctx, dv);
    for (int t = 1; t <= 3; ++t) {
      const Tensor g = randoms(n, 10 + t, -2, 2);
      ops::transfer(ctx, g, dg);
      ops::AdamWStep s;
      s.lr = 1e-3f * t, s.beta1 = 0.9f, s.beta2 = 0.95f, s.weight_decay = 0.1f, s.clip = t == 2 ? 0.5f : 1.0f;
      s.bias_correction1 = 1 - std::pow(0.9, t), s.bias_correction2 = 1 - std::pow(0.95, t);
      ops::adamw_update(cpu, w, g, m, v, Tensor(), s);
      ops::adamw_update(ctx, dw, dg, dm, dv, dc, s);
    }
    Tensor hw = Tensor::empty({n}, DType::F32), hm = Tensor::empty({n}, md), hv = Tensor::empty({n}, vd);
    ops::transfer(ctx, dw, hw);
    ops::transfer(ctx, dm, hm);
    ops::transfer(ctx, dv, hv);
    EXPECT_TRUE(same_bytes(hw, w)) << "weights";
    EXPECT_TRUE(same_bytes(hm, m)) << "exp_avg";
    EXPECT_TRUE(same_bytes(hv, v)) << "exp_avg_sq";
  }
}

// The tiny model's table on the GPU (bf16 compute buckets for matrices, fp32 for the rest).
ParamTable tiny_on_gpu(double fraction) {
  const InklingConfig config = load_inkling_config(std::string(QUILL_SOURCE_DIR) + "/configs/tiny.json");
  ParamTable t = ParamTable::for_config(config);
  t.init_random(7);
  t.freeze(miles_frozen_patterns());
  const Layout single = Layout::single(config.num_layers);
  place_params(t, gpu_ctx(), single, fraction);
  return t;
}

struct Result {
  ParamTable values;              // fp32 masters, whole
  std::vector<Tensor> compute;    // every bucket's compute copy, on the host
};

Result train_on_gpu(double fraction, bool overlap, DType moments, int64_t stretch = int64_t{1} << 24) {
  const DeviceContext ctx = gpu_ctx();
  ParamTable t = tiny_on_gpu(fraction);
  bool has_bf16 = false;
  for (const ParamBucket& b : t.buckets()) has_bf16 |= b.compute_dtype == DType::BF16;
  EXPECT_TRUE(has_bf16);
  AdamWConfig c;
  c.weight_decay = 0.1;
  c.memory.cpu_offload = fraction > 0;
  c.memory.offload_fraction = fraction;
  c.memory.overlap_d2h_h2d = overlap;
  c.memory.exp_avg = c.memory.exp_avg_sq = moments;
  c.offload_stretch_elements = stretch;
  AdamW opt(t, c, ctx);
  for (int step = 0; step < 4; ++step) {
    uint64_t seed = 100 + step;
    for (Param& p : t.params())
      if (p.trainable) ops::transfer(ctx, randoms(p.grad.numel(), seed++, -1, 1).view_flat(0, p.shape), p.grad);
    opt.update(step == 0 ? 0.0 : 1e-2 / step, 0.5 + step);
  }
  Result r{host_copy(t, ctx), {}};
  for (const ParamBucket& b : t.buckets()) {
    Tensor h = Tensor::empty({b.numel}, b.compute_dtype);
    ops::transfer(ctx, b.compute, h);
    r.compute.push_back(h);
  }
  return r;
}

TEST(CudaOptimizerOffload, EqualsAllDeviceBitForBit) {
  QUILL_REQUIRE_GPU();
  for (DType moments : {DType::F32, DType::BF16}) {
    const Result ref = train_on_gpu(0.0, false, moments);
    // Stretches of 2^24 (one per head here) and of 333 elements: many pipelined copies down, each
    // waited for by its fence, members cut at stretch edges.
    for (double f : {0.3, 0.7, 1.0})
      for (bool overlap : {false, true})
        for (int64_t stretch : {int64_t{1} << 24, int64_t{333}}) {
          const Result got = train_on_gpu(f, overlap, moments, stretch);
          for (size_t i = 0; i < ref.values.params().size(); ++i)
            EXPECT_TRUE(same_bytes(got.values.params()[i].value, ref.values.params()[i].value))
                << "F " << f << " overlap " << overlap << " stretch " << stretch << " moments " << dtype_name(moments)
                << ": " << ref.values.params()[i].name;
          for (size_t b = 0; b < ref.compute.size(); ++b)
            EXPECT_TRUE(same_bytes(got.compute[b], ref.compute[b])) << "F " << f << " compute copy of bucket " << b;
        }
  }
}

}  // namespace
}  // namespace quill
