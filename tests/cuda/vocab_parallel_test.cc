// The CUDA vocab-parallel ops against the CPU's single-device ops: bf16 logits of an LM-head-like row
// width cut into 4 column shards (the last past the softmax's columns), the statistics gathered in
// shard order: the loss within 1e-5 and each shard's gradient within bf16 rounding of the fused CPU
// op's columns; the embedding's shard lookups and gradients bit-equal to the whole table's rows.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "cuda/harness.h"
#include "ops/cross_entropy.h"
#include "ops/embedding.h"
#include "util/test_util.h"

namespace quill {
namespace {

using test::expect_close;
using test::random_tensor;
using test::round_bf16;
using test::to_device;
using test::to_host_f32;

Tensor columns(const Tensor& x, int64_t c0, int64_t c1) {
  const int64_t T = x.dim(0), V = x.dim(1), w = c1 - c0;
  Tensor out = Tensor::empty({T, w}, x.dtype());
  for (int64_t t = 0; t < T; ++t)
    std::memcpy(out.data_as<float>() + t * w, x.data_as<float>() + t * V + c0, w * sizeof(float));
  return out;
}

TEST(CudaVocabParallel, CrossEntropyShardsMatchTheWholeRowOnTheCpu) {
  QUILL_REQUIRE_GPU();
  constexpr int64_t T = 33, V = 4096, L = 3000;
  constexpr int R = 4, W = V / R;  // shard 3 = [3072, 4096): no column below L
  const Tensor logits = round_bf16(random_tensor({T, V}, DType::F32, 77, 3.0));
  Tensor targets = Tensor::empty({T}, DType::I32), weights = Tensor::empty({T}, DType::F32);
  std::mt19937 rng(5);
  for (int64_t t = 0; t < T; ++t) {
    targets.data_as<int32_t>()[t] = static_cast<int32_t>(rng() % L);
    weights.data_as<float>()[t] = t % 5 == 3 ? 0.f : 1.f;
  }
  const double scale = 1.0 / 20;
  Tensor dref = Tensor::empty({T, V}, DType::F32);
  const double ref =
      ops::cross_entropy_forward_backward(DeviceContext::cpu(), logits, targets, weights, L, scale, dref);
  const DeviceContext ctx = test::gpu_ctx();
  const Tensor tg = to_device(targets, DType::I32), wg = to_device(weights, DType::F32);
  std::vector<Tensor> shards;
  Tensor all = Tensor::empty({R, T, 3}, DType::F32, *ctx.allocator);
  for (int r = 0; r < R; ++r) {
    shards.push_back(to_device(columns(logits, r * W, (r + 1) * W), DType::BF16));
    ops::cross_entropy_shard_stats(ctx, shards[r], tg, wg, r * W, L, all.view_flat(r * T * 3, {T, 3}));
  }
  for (int r = 0; r < R; ++r) {
    Tensor d = Tensor::empty({T, W}, DType::BF16, *ctx.allocator);
    const double loss = ops::cross_entropy_shard_backward(ctx, shards[r], tg, wg, r * W, L, all, scale, d);
    EXPECT_NEAR(loss, ref, 1e-5 * ref) << "shard " << r;
    const Tensor got = to_host_f32(d), want = columns(dref, r * W, (r + 1) * W);
    if (r == R - 1) {
      for (int64_t i = 0; i < got.numel(); ++i) ASSERT_EQ(got.data_as<float>()[i], 0.f) << "past the softmax";
    } else {
      expect_close("shard " + std::to_string(r) + " dlogits", got, want, 1e-2);
    }
  }
}

TEST(CudaVocabParallel, EmbeddingShardsAreTheWholeTablesRows) {
  QUILL_REQUIRE_GPU();
  constexpr int64_t V = 64, D = 256, T = 50, R = 4, Vr = V / R;
  const Tensor table = round_bf16(random_tensor({V, D}, DType::F32, 8));
  Tensor ids = Tensor::empty({T}, DType::I32);
  for (int64_t t = 0; t < T; ++t) ids.data_as<int32_t>()[t] = static_cast<int32_t>((t * 13 + 3) % V);
  const Tensor dout = round_bf16(random_tensor({T, D}, DType::F32, 9));
  Tensor whole = Tensor::empty({T, D}, DType::F32), dwhole = Tensor::zeros({V, D}, DType::F32);
  ops::embedding_forward(DeviceContext::cpu(), table, ids, whole);
  ops::embedding_backward(DeviceContext::cpu(), ids, dout, dwhole);
  const DeviceContext ctx = test::gpu_ctx();
  const Tensor idg = to_device(ids, DType::I32), doutg = to_device(dout, DType::BF16);
  Tensor sum = Tensor::zeros({T, D}, DType::F32);
  for (int64_t r = 0; r < R; ++r) {
    Tensor part = Tensor::empty({T, D}, DType::BF16, *ctx.allocator);
    ops::embedding_forward_shard(ctx, to_device(table.rows(r * Vr, (r + 1) * Vr).clone(), DType::BF16), idg, r * Vr,
                                 V, part);
    const Tensor p = to_host_f32(part);
    for (int64_t i = 0; i < T * D; ++i) sum.data_as<float>()[i] += p.data_as<float>()[i];
    Tensor dshard = to_device(Tensor::zeros({Vr, D}, DType::F32), DType::F32);
    ops::embedding_backward_shard(ctx, idg, doutg, r * Vr, V, dshard);
    const Tensor got = to_host_f32(dshard), want = dwhole.rows(r * Vr, (r + 1) * Vr).clone();
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.nbytes()), 0) << "shard " << r;
  }
  EXPECT_EQ(std::memcmp(sum.data(), whole.data(), sum.nbytes()), 0);
}

}  // namespace
}  // namespace quill
