// The FP8 matrices' transient bf16 copies on the GPU (model/transient_compute.h; skips without one): a table
// whose FP8 matrices are marked before placement (their buckets' compute buffers held only while the
// weights are written) against the same table marked after placement (every bf16 copy resident, each FP8
// copy made at its first use, as before the change): after placement, after each of four optimizer steps
// (all on the device, and with 70% of the state offloaded to the host) and after a refresh from the masters,
// every FP8 copy is the same bytes, the masters the same bits, and the transient buffers are not held.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "cuda/harness.h"
#include "util/test_util.h"
#include "model/config.h"
#include "model/fp8_params.h"
#include "model/param_placement.h"
#include "model/transient_compute.h"
#include "ops/convert.h"
#include "optim/adamw.h"

namespace quill {
namespace {

using test::gpu_ctx;

// fp8-wide: every FP8 matrix's dimensions are multiples of 16 (the CUDA FP8 GEMMs' rule), some cross a
// 128-element block. One FP8 matrix frozen: its bf16 copy is transient too.
ParamTable wide_table() {
  const InklingConfig config =
      load_inkling_config(std::string(QUILL_SOURCE_DIR) + "/tests/fixtures/configs/fp8-wide.json");
  ParamTable t = ParamTable::for_config(config);
  t.init_random(7);
  t.freeze({"model.llm.layers.1.attn.wo_ud.weight"});
  return t;
}

Tensor on_host(const Tensor& t) {
  Tensor h = Tensor::empty(t.shape(), t.dtype());
  ops::transfer(gpu_ctx(), t, h);
  return h;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  const Tensor ha = on_host(a), hb = on_host(b);
  return ha.nbytes() == hb.nbytes() && std::memcmp(ha.data(), hb.data(), ha.nbytes()) == 0;
}

void expect_same_fp8_copies(const ParamTable& transient, const ParamTable& resident, const std::string& when) {
  const DeviceContext ctx = gpu_ctx();
  int compared = 0;
  for (size_t i = 0; i < transient.params().size(); ++i) {
    const Param& a = transient.params()[i];
    const Param& b = resident.params()[i];
    if (!a.fp8) continue;
    ++compared;
    EXPECT_FALSE(a.compute.defined()) << when << ": " << a.name << " still holds its bf16 copy";
    const ops::Fp8Tensor& ca = fp8_weight(ctx, a);  // made already: a transient copy cannot be remade
    const ops::Fp8Tensor& cb = fp8_weight(ctx, b);
    EXPECT_TRUE(same_bytes(ca.codes, cb.codes)) << when << ": " << a.name << " codes";
    EXPECT_TRUE(same_bytes(ca.scale_inv, cb.scale_inv)) << when << ": " << a.name << " scales";
    EXPECT_TRUE(same_bytes(ca.codes_t, cb.codes_t)) << when << ": " << a.name << " transposed codes";
    EXPECT_TRUE(same_bytes(ca.scale_inv_t, cb.scale_inv_t)) << when << ": " << a.name << " transposed scales";
  }
  EXPECT_GT(compared, 10) << when;
  for (const ParamBucket& bucket : transient.buckets()) {
    if (bucket.compute_transient) {
      EXPECT_FALSE(bucket.compute.defined()) << when << ": a transient bucket is held";
    }
  }
}

TEST(CudaFp8TransientCompute, SameFp8CopiesAsResidentBf16CopiesThroughStepsAndARefresh) {
  QUILL_REQUIRE_GPU();
  const DeviceContext ctx = gpu_ctx();
  for (double fraction : {0.0, 0.7}) {
    SCOPED_TRACE("offload " + std::to_string(fraction));
    const Layout single = Layout::single(4);
    ParamTable transient = wide_table(), resident = wide_table();
    mark_fp8_params(transient, Device::CUDA, true);
    place_params(transient, ctx, single, fraction);
    place_params(resident, ctx, single, fraction);
    mark_fp8_params(resident, Device::CUDA, true);
    int transient_buckets = 0;
    for (const ParamBucket& b : transient.buckets()) transient_buckets += b.compute_transient ? 1 : 0;
    for (const ParamBucket& b : resident.buckets()) EXPECT_FALSE(b.compute_transient);
    ASSERT_GE(transient_buckets, 2) << "the dense and the routed experts' FP8 matrices";
    expect_same_fp8_copies(transient, resident, "after placement");

    AdamWConfig c;
    c.weight_decay = 0.1;
    c.memory.cpu_offload = fraction > 0;
    c.memory.offload_fraction = fraction;
    c.memory.exp_avg = c.memory.exp_avg_sq = DType::BF16;
    AdamW opt_t(transient, c, ctx), opt_r(resident, c, ctx);
    for (int step = 0; step < 4; ++step) {
      for (ParamTable* t : {&transient, &resident}) {
        uint64_t seed = 100 + step;
        for (Param& p : t->params())
          if (p.trainable)
            ops::transfer(ctx, test::random_tensor(p.shape, DType::F32, seed++), p.grad);
      }
      opt_t.update(1e-2, 0.5 + step);
      opt_r.update(1e-2, 0.5 + step);
      expect_same_fp8_copies(transient, resident, "after step " + std::to_string(step));
    }
    const ParamTable masters_t = host_copy(transient, ctx), masters_r = host_copy(resident, ctx);
    for (size_t i = 0; i < masters_t.params().size(); ++i)
      EXPECT_TRUE(std::memcmp(masters_t.params()[i].value.data(), masters_r.params()[i].value.data(),
                              masters_t.params()[i].value.nbytes()) == 0)
          << masters_t.params()[i].name;
    refresh_compute(transient, ctx);
    refresh_compute(resident, ctx);
    expect_same_fp8_copies(transient, resident, "after a refresh");
  }
}

}  // namespace
}  // namespace quill
