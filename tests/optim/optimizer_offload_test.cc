// CPU offload and bf16 moments inside the optimizer, on the tiny model's table with fixed
// gradients: the host/device partition (model/offload_split.h), the offloaded run equal to the
// all-device run bit for bit, the offloaded part actually updated, and bf16 moments within the
// rounding bound of fp32 moments (the gradients fixed, so the bound is the optimizer's alone).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "base/error.h"
#include "model/config.h"
#include "model/offload_split.h"
#include "model/param_placement.h"
#include "optim/adamw.h"

namespace quill {
namespace {

TEST(OffloadSplit, SharesRoundedToAlignedBlocks) {
  const std::vector<int64_t> sizes = {0, 10, 64, 1000, 155264, 147456};
  EXPECT_EQ(offload_split(sizes, 0.0), (std::vector<int64_t>{0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(offload_split(sizes, 1.0), sizes);
  for (double f : {0.3, 0.5, 0.7}) {
    const std::vector<int64_t> h = offload_split(sizes, f);
    for (size_t i = 0; i < sizes.size(); ++i) {
      EXPECT_TRUE(h[i] % kOffloadAlign == 0 || h[i] == sizes[i]) << f << " " << sizes[i];
      EXPECT_LE(h[i], sizes[i]);
      EXPECT_LE(std::fabs(static_cast<double>(h[i]) - f * static_cast<double>(sizes[i])), kOffloadAlign / 2.0)
          << f << " " << sizes[i];
    }
  }
  EXPECT_EQ(offload_split({155264}, 0.3), (std::vector<int64_t>{46592}));  // 727.8 blocks of 64 -> 728
  EXPECT_THROW(offload_split(sizes, 1.5), Error);
  EXPECT_THROW(offload_split(sizes, -0.1), Error);
}

ParamTable tiny_table(double fraction) {
  const InklingConfig config = load_inkling_config(std::string(QUILL_SOURCE_DIR) + "/configs/tiny.json");
  ParamTable t = ParamTable::for_config(config);
  t.init_random(7);
  t.freeze(miles_frozen_patterns());
  const Layout single = Layout::single(config.num_layers);
  place_params(t, DeviceContext::cpu(), single, fraction);
  return t;
}

TEST(OffloadSplit, PlacementPutsTheHeadOfEveryShardOnTheHost) {
  ParamTable ref = tiny_table(0.0);
  for (double f : {0.3, 0.7, 1.0}) {
    ParamTable t = tiny_table(f);
    std::vector<int64_t> shards;
    for (const ParamBucket& b : t.buckets()) shards.push_back(b.shard_end - b.shard_begin);
    const std::vector<int64_t> want = offload_split(shards, f);
    for (size_t bi = 0; bi < t.buckets().size(); ++bi) {
      const ParamBucket& b = t.buckets()[bi];
      EXPECT_EQ(b.offload_end, want[bi]);
      ASSERT_TRUE(b.host_master.defined());
      EXPECT_EQ(b.host_master.numel(), b.offload_end);
      EXPECT_EQ(b.master.numel(), shards[bi] - b.offload_end);
      // The host master holds the initial values of its range; the compute copy holds them all.
      const ParamBucket& r = ref.buckets()[bi];
      EXPECT_EQ(std::memcmp(b.host_master.data(), r.master.data(), b.host_master.nbytes()), 0) << f;
      EXPECT_EQ(std::memcmp(b.compute.data(), r.compute.data(), b.compute.nbytes()), 0) << f;
      EXPECT_THROW(b.master_range(b.offload_end - 1, 2), Error);  // straddles the boundary
    }
    const std::vector<std::string> log = describe_offload(t);
    ASSERT_FALSE(log.empty());
    EXPECT_NE(log.front().find("state elements on the host"), std::string::npos) << log.front();
    // host_copy assembles the same whole values.
    const ParamTable a = host_copy(t, DeviceContext::cpu()), b = host_copy(ref, DeviceContext::cpu());
    for (size_t i = 0; i < a.params().size(); ++i)
      EXPECT_EQ(std::memcmp(a.params()[i].value.data(), b.params()[i].value.data(), a.params()[i].value.nbytes()), 0);
  }
}

// Deterministic gradients of step t for every trainable element, in [-1, 1), some exactly zero.
void fill_grads(ParamTable& t, int step) {
  for (Param& p : t.params()) {
    if (!p.trainable) continue;
    float* g = p.grad.data_as<float>();
    uint64_t s = std::hash<std::string>{}(p.name) ^ (0x9E3779B97F4A7C15ull * static_cast<uint64_t>(step));
    for (int64_t i = 0; i < p.grad.numel(); ++i) {
      s ^= s << 13, s ^= s >> 7, s ^= s << 17;
      g[i] = i % 17 == 0 ? 0.0f : static_cast<float>(s % 2000003) / 1000001.5f - 1.0f;
    }
  }
}

const double kLr[5] = {0.0, 1e-2, 8e-3, 5e-3, 2e-3};

// Five steps; returns every parameter's final fp32 value.
ParamTable train(double fraction, bool overlap, DType moments, int64_t stretch = int64_t{1} << 24) {
  ParamTable t = tiny_table(fraction);
  AdamWConfig c;
  c.weight_decay = 0.1;
  c.memory.cpu_offload = fraction > 0;
  c.memory.offload_fraction = fraction;
  c.memory.overlap_d2h_h2d = overlap;
  c.memory.exp_avg = c.memory.exp_avg_sq = moments;
  c.offload_stretch_elements = stretch;
  AdamW opt(t, c);
  for (int step = 0; step < 5; ++step) {
    fill_grads(t, step);
    opt.update(kLr[step], 0.5 + step);  // norms below and above clip_grad 1
  }
  EXPECT_EQ(opt.steps_taken(), 5);
  EXPECT_EQ(opt.exp_avg(0).dtype(), moments);
  return host_copy(t, DeviceContext::cpu());
}

TEST(AdamWOffload, EqualsAllDeviceBitForBitAndUpdatesTheHostPart) {
  const ParamTable start = host_copy(tiny_table(0.0), DeviceContext::cpu());
  const ParamTable ref = train(0.0, false, DType::F32);
  // Stretches of 2^24 (one per head) and of 97 elements (members cut at stretch edges).
  for (double f : {0.3, 0.7, 1.0})
    for (bool overlap : {false, true})
      for (int64_t stretch : {int64_t{1} << 24, int64_t{97}}) {
        const ParamTable got = train(f, overlap, DType::F32, stretch);
        for (size_t i = 0; i < ref.params().size(); ++i) {
          const Tensor& a = got.params()[i].value;
          const Tensor& b = ref.params()[i].value;
          EXPECT_EQ(std::memcmp(a.data(), b.data(), a.nbytes()), 0)
              << "F " << f << " overlap " << overlap << " stretch " << stretch << ": " << ref.params()[i].name;
        }
      }
  // The check above has teeth: every trainable parameter moved from its start (an offloaded part
  // left at its start would differ from the all-device run by this much).
  for (size_t i = 0; i < ref.params().size(); ++i) {
    if (!ref.params()[i].trainable) continue;
    EXPECT_NE(std::memcmp(ref.params()[i].value.data(), start.params()[i].value.data(), start.params()[i].value.nbytes()),
              0)
        << ref.params()[i].name;
  }
}

TEST(AdamWOffload, HostPartAloneIsUpdated) {
  // F = 1: everything is on the host; F = 0.5: the heads. The heads' values after five steps differ
  // from their start in every element that had a nonzero gradient at a nonzero learning rate.
  for (double f : {0.5, 1.0}) {
    ParamTable t = tiny_table(f);
    std::vector<Tensor> before;
    for (const ParamBucket& b : t.buckets()) before.push_back(b.host_master.clone());
    AdamWConfig c;
    c.memory.cpu_offload = true;
    c.memory.offload_fraction = f;
    AdamW opt(t, c);
    for (int step = 0; step < 3; ++step) {
      fill_grads(t, step);
      opt.update(1e-2, 0.5);
    }
    int64_t changed = 0, total = 0;
    for (size_t bi = 0; bi < t.buckets().size(); ++bi) {
      const ParamBucket& b = t.buckets()[bi];
      for (int64_t i = 0; i < b.offload_end; ++i, ++total)
        changed += b.host_master.data_as<float>()[i] != before[bi].data_as<float>()[i];
    }
    ASSERT_GT(total, 0);
    // Gradients are zero at every 17th element of a tensor, and the bucket's padding never trains.
    EXPECT_GT(static_cast<double>(changed) / static_cast<double>(total), 0.9) << f;
    EXPECT_GT(opt.host_moment_bytes(), 0);
  }
}

// bf16 moments against fp32 moments, the gradients fixed: each store rounds a moment to nearest
// even (relative error <= 2^-9); the update of step t uses the fp32 moments it just computed from
// t - 1 rounded stores, at most (t - 1) 2^-9 relative in m and v each (relative to the moving sum of
// |g|, and v >= 0 does not cancel), so at most (t - 1) 2^-8 of Adam's step |m^ / sqrt(v^)| <= R_t
// (Cauchy-Schwarz on the averages, R_t = sqrt(sum_k a_k^2 / b_k) sqrt(1 - b2^t) / (1 - b1^t),
// a_k = (1-b1) b1^(t-k), b_k = (1-b2) b2^(t-k)). Weight decay only shrinks earlier differences. So
// no weight moves more than sum_t lr_t (t - 1) 2^-8 R_t away from the fp32 run's; clipping scales
// the gradient alike in both.
TEST(AdamWBf16Moments, WithinTheRoundingBoundOfFp32) {
  const ParamTable ref = train(0.0, false, DType::F32);
  double bound = 0;
  for (int t = 1; t <= 5; ++t) {
    double s = 0;
    for (int k = 1; k <= t; ++k) {
      const double a = 0.1 * std::pow(0.9, t - k), b = 0.001 * std::pow(0.999, t - k);
      s += a * a / b;
    }
    bound += kLr[t - 1] * (t - 1) * std::ldexp(1.0, -8) * std::sqrt(s) * std::sqrt(1 - std::pow(0.999, t)) /
             (1 - std::pow(0.9, t));
  }
  const ParamTable dev = train(0.0, false, DType::BF16);
  double worst = 0;
  for (size_t i = 0; i < ref.params().size(); ++i)
    for (int64_t j = 0; j < ref.params()[i].value.numel(); ++j)
      worst = std::max(worst, std::fabs(double(dev.params()[i].value.data_as<float>()[j]) -
                                        ref.params()[i].value.data_as<float>()[j]));
  EXPECT_GT(worst, 0.0) << "bf16 moments gave fp32's weights bit for bit";
  EXPECT_LE(worst, bound);
  std::printf("bf16 moments: weights within %.3g of fp32 moments' (bound %.3g)\n", worst, bound);
  // Offloaded bf16 moments are the device's, bit for bit.
  for (double f : {0.3, 1.0}) {
    const ParamTable off = train(f, true, DType::BF16);
    for (size_t i = 0; i < dev.params().size(); ++i)
      EXPECT_EQ(std::memcmp(off.params()[i].value.data(), dev.params()[i].value.data(), dev.params()[i].value.nbytes()), 0)
          << f << " " << dev.params()[i].name;
  }
}

TEST(AdamWBf16Moments, ReferenceOpRoundsOnStoreOnly) {
  // One element by hand: the update uses the fp32 moment; the stored one is its bf16 rounding.
  Tensor w = Tensor::zeros({1}, DType::F32), g = Tensor::zeros({1}, DType::F32);
  Tensor m = Tensor::zeros({1}, DType::BF16), v = Tensor::zeros({1}, DType::BF16);
  w.data_as<float>()[0] = 1.0f;
  g.data_as<float>()[0] = 0.3f;
  ops::AdamWStep s;
  s.lr = 0.1f;
  s.bias_correction1 = 0.1;
  s.bias_correction2 = 0.001;
  ops::adamw_update(DeviceContext::cpu(), w, g, m, v, Tensor(), s);
  const float mf = 0.9f * 0.0f + (1.0f - 0.9f) * 0.3f;
  const float vf = 0.999f * 0.0f + (1.0f - 0.999f) * 0.3f * 0.3f;
  EXPECT_EQ(m.data_as<uint16_t>()[0], f32_to_bf16(mf));
  EXPECT_EQ(v.data_as<uint16_t>()[0], f32_to_bf16(vf));
  EXPECT_NE(bf16_to_f32(m.data_as<uint16_t>()[0]), mf);  // 0.03 is not a bf16 value: the store rounded
  const float step_size = static_cast<float>(0.1 / 0.1), bc2 = static_cast<float>(std::sqrt(0.001));
  EXPECT_EQ(w.data_as<float>()[0], 1.0f - step_size * mf / (std::sqrt(vf) / bc2 + 1e-8f));
}

TEST(AdamWConfigCheck, RefusesBf16MainGradsNamingTheFlag) {
  AdamWConfig c;
  c.memory.main_grads = DType::BF16;
  try {
    check_adamw_config(c);
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--main-grads-dtype bf16"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace quill
