// The vocab-parallel ops (ops/embedding.h, ops/cross_entropy.h) on the CPU reference: a [T, V] table or
// logits cut into R column (row) shards, each shard's call, the statistics gathered in shard order:
// the loss and the concatenated gradient equal the single-device op (double: to 1e-12), a shard holding
// none of the softmax's columns included; the embedding's partial lookups sum to the whole lookup and
// its shard gradients are the whole gradient's rows; a weighted target outside the vocabulary is named.
#include <gtest/gtest.h>

#include <cstring>

#include "base/error.h"
#include "ops/cross_entropy.h"
#include "ops/embedding.h"
#include "util/test_util.h"

namespace quill {
namespace {

using test::random_tensor;
using test::rel_l2;

const DeviceContext kCpu = DeviceContext::cpu();

// Columns [c0, c1) of a [T, V] tensor as a contiguous [T, c1 - c0] one.
Tensor columns(const Tensor& x, int64_t c0, int64_t c1) {
  const int64_t T = x.dim(0), V = x.dim(1), w = c1 - c0;
  Tensor out = Tensor::empty({T, w}, x.dtype());
  const size_t es = dtype_size(x.dtype());
  for (int64_t t = 0; t < T; ++t)
    std::memcpy(static_cast<char*>(out.data()) + t * w * es, static_cast<const char*>(x.data()) + (t * V + c0) * es,
                w * es);
  return out;
}

TEST(VocabParallelCrossEntropy, ShardsEqualTheWholeRow) {
  constexpr int64_t T = 9, V = 40, L = 27;  // four shards of 10: the last holds no column below L
  const Tensor logits = random_tensor({T, V}, DType::F64, 31, 4.0);
  Tensor targets = Tensor::empty({T}, DType::I32), weights = Tensor::empty({T}, DType::F64);
  for (int64_t t = 0; t < T; ++t) {
    targets.data_as<int32_t>()[t] = static_cast<int32_t>((t * 7) % L);
    weights.data_as<double>()[t] = t % 4 == 2 ? 0.0 : 1.0;
  }
  targets.data_as<int32_t>()[2] = -100;  // unweighted: never read
  const double scale = 1.0 / 7;
  Tensor dref = Tensor::empty({T, V}, DType::F64);
  const double ref = ops::cross_entropy_forward_backward(kCpu, logits, targets, weights, L, scale, dref);

  constexpr int R = 4, W = V / R;
  Tensor all = Tensor::empty({R, T, 3}, DType::F64);
  for (int r = 0; r < R; ++r)
    ops::cross_entropy_shard_stats(kCpu, columns(logits, r * W, (r + 1) * W), targets, weights, r * W, L,
                                   all.view_flat(r * T * 3, {T, 3}));
  for (int r = 0; r < R; ++r) {
    Tensor d = Tensor::empty({T, W}, DType::F64);
    const double loss = ops::cross_entropy_shard_backward(kCpu, columns(logits, r * W, (r + 1) * W), targets, weights,
                                                          r * W, L, all, scale, d);
    EXPECT_NEAR(loss, ref, 1e-12 * ref) << "shard " << r;
    EXPECT_LE(rel_l2(d, columns(dref, r * W, (r + 1) * W)) , 1e-12) << "shard " << r;
  }
}

TEST(VocabParallelCrossEntropy, TargetOutsideTheVocabularyIsNamed) {
  const Tensor logits = random_tensor({3, 8}, DType::F32, 2);
  Tensor targets = Tensor::empty({3}, DType::I32), weights = Tensor::empty({3}, DType::F32);
  for (int t = 0; t < 3; ++t) targets.data_as<int32_t>()[t] = t, weights.data_as<float>()[t] = 1.f;
  targets.data_as<int32_t>()[1] = 12;
  Tensor stats = Tensor::empty({3, 3}, DType::F64);
  try {
    ops::cross_entropy_shard_stats(kCpu, logits, targets, weights, 8, 12, stats);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("target 12 at position 1 (weight 1) is outside the vocabulary [0, 12)"),
              std::string::npos)
        << e.what();
  }
}

TEST(VocabParallelEmbedding, ShardLookupsSumToTheWholeAndGradientsAreItsRows) {
  constexpr int64_t V = 12, D = 5, T = 7, R = 3, Vr = V / R;
  const Tensor table = random_tensor({V, D}, DType::F32, 4);
  Tensor ids = Tensor::empty({T}, DType::I32);
  for (int64_t t = 0; t < T; ++t) ids.data_as<int32_t>()[t] = static_cast<int32_t>((t * 5 + 1) % V);
  ids.data_as<int32_t>()[3] = ids.data_as<int32_t>()[0];  // a repeated id adds up
  Tensor whole = Tensor::empty({T, D}, DType::F32);
  ops::embedding_forward(kCpu, table, ids, whole);
  const Tensor dout = random_tensor({T, D}, DType::F32, 5);
  Tensor dwhole = Tensor::zeros({V, D}, DType::F32);
  ops::embedding_backward(kCpu, ids, dout, dwhole);
  Tensor sum = Tensor::zeros({T, D}, DType::F32);
  for (int64_t r = 0; r < R; ++r) {
    const Tensor shard = table.rows(r * Vr, (r + 1) * Vr).clone();
    Tensor part = Tensor::empty({T, D}, DType::F32);
    ops::embedding_forward_shard(kCpu, shard, ids, r * Vr, V, part);
    for (int64_t i = 0; i < T * D; ++i) sum.data_as<float>()[i] += part.data_as<float>()[i];
    Tensor dshard = Tensor::zeros({Vr, D}, DType::F32);
    ops::embedding_backward_shard(kCpu, ids, dout, r * Vr, V, dshard);
    EXPECT_EQ(std::memcmp(dshard.data(), dwhole.rows(r * Vr, (r + 1) * Vr).data(), dshard.nbytes()), 0) << r;
  }
  EXPECT_EQ(std::memcmp(sum.data(), whole.data(), sum.nbytes()), 0);
  try {
    Tensor bad = ids.clone();
    bad.data_as<int32_t>()[2] = 12;
    Tensor part = Tensor::empty({T, D}, DType::F32);
    ops::embedding_forward_shard(kCpu, table.rows(0, Vr).clone(), bad, 0, V, part);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token id 12 at position 2 is outside the vocabulary [0, 12)"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace quill
