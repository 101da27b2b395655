// Embedding CPU reference: lookup values, finite-difference gradient of the table in double with
// repeated ids, accumulate semantics, out-of-range ids named by position, shape errors, float/double.
#include "ops/embedding.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "base/error.h"
#include "util/test_util.h"

namespace quill {
namespace {

using test::dot;
using test::get;
using test::random_tensor;
using test::rel_l2;

const DeviceContext kCpu = DeviceContext::cpu();

Tensor ids_tensor(const std::vector<int32_t>& ids) {
  Tensor t = Tensor::empty({static_cast<int64_t>(ids.size())}, DType::I32);
  for (size_t i = 0; i < ids.size(); ++i) t.data_as<int32_t>()[i] = ids[i];
  return t;
}

using test::error_of;
TEST(EmbeddingCpu, ForwardCopiesRows) {
  const int64_t V = 11, D = 5;
  Tensor table = random_tensor({V, D}, DType::F64, 1);
  Tensor ids = ids_tensor({3, 0, 10, 3, 7, 1, 3});
  Tensor out = Tensor::empty({7, D}, DType::F64);
  ops::embedding_forward(kCpu, table, ids, out);
  for (int64_t t = 0; t < 7; ++t)
    for (int64_t d = 0; d < D; ++d)
      EXPECT_EQ(get(out, t * D + d), get(table, ids.data_as<int32_t>()[t] * D + d)) << t << "," << d;
}

TEST(EmbeddingCpu, GradientMatchesFiniteDifferences) {
  const int64_t V = 11, D = 5;
  Tensor table = random_tensor({V, D}, DType::F64, 2);
  Tensor ids = ids_tensor({3, 0, 10, 3, 7, 1, 3});  // id 3 three times, several ids unused
  Tensor probe = random_tensor({7, D}, DType::F64, 3);
  Tensor dtable = Tensor::zeros({V, D}, DType::F64);
  ops::embedding_backward(kCpu, ids, probe, dtable);
  Tensor out = Tensor::empty({7, D}, DType::F64);
  auto loss = [&] {
    ops::embedding_forward(kCpu, table, ids, out);
    return dot(out, probe);
  };
  test::check_gradients(loss, {{"table", table, dtable}}, 1e-6, 1e-6);
  for (int64_t d = 0; d < D; ++d) EXPECT_EQ(get(dtable, 2 * D + d), 0.0);  // unused row untouched
}

TEST(EmbeddingCpu, BackwardAccumulates) {
  const int64_t V = 11, D = 5;
  Tensor ids = ids_tensor({3, 0, 10, 3, 7, 1, 3});
  Tensor dout = random_tensor({7, D}, DType::F64, 4);
  Tensor fresh = Tensor::zeros({V, D}, DType::F64);
  ops::embedding_backward(kCpu, ids, dout, fresh);
  Tensor old = random_tensor({V, D}, DType::F64, 5);
  Tensor dtable = old.clone();
  ops::embedding_backward(kCpu, ids, dout, dtable);
  for (int64_t i = 0; i < V * D; ++i) EXPECT_NEAR(get(dtable, i), get(old, i) + get(fresh, i), 1e-12) << i;
}

TEST(EmbeddingCpu, FloatAgreesWithDouble) {
  const int64_t V = 11, D = 6;
  Tensor table = random_tensor({V, D}, DType::F64, 6);
  Tensor dout = random_tensor({9, D}, DType::F64, 7);
  Tensor ids = ids_tensor({5, 5, 0, 10, 2, 5, 9, 9, 1});
  Tensor out64 = Tensor::empty({9, D}, DType::F64), out32 = Tensor::empty({9, D}, DType::F32);
  Tensor dt64 = Tensor::zeros({V, D}, DType::F64), dt32 = Tensor::zeros({V, D}, DType::F32);
  ops::embedding_forward(kCpu, table, ids, out64);
  ops::embedding_forward(kCpu, convert_dtype(table, DType::F32), ids, out32);
  ops::embedding_backward(kCpu, ids, dout, dt64);
  ops::embedding_backward(kCpu, ids, convert_dtype(dout, DType::F32), dt32);
  EXPECT_LE(rel_l2(out32, out64), 1e-6);
  EXPECT_LE(rel_l2(dt32, dt64), 1e-6);
}

TEST(EmbeddingCpu, OutOfRangeIdNamesThePosition) {
  Tensor table = random_tensor({11, 5}, DType::F32, 8);
  Tensor out = Tensor::empty({4, 5}, DType::F32);
  std::string msg = error_of([&] { ops::embedding_forward(kCpu, table, ids_tensor({1, 2, 3, 11}), out); });
  EXPECT_NE(msg.find("position 3"), std::string::npos) << msg;
  EXPECT_NE(msg.find("11"), std::string::npos) << msg;
  msg = error_of([&] { ops::embedding_forward(kCpu, table, ids_tensor({1, -1, 3, 4}), out); });
  EXPECT_NE(msg.find("position 1"), std::string::npos) << msg;
  Tensor dtable = Tensor::zeros({11, 5}, DType::F32);
  msg = error_of([&] { ops::embedding_backward(kCpu, ids_tensor({0, 0, 12, 0}), out, dtable); });
  EXPECT_NE(msg.find("position 2"), std::string::npos) << msg;
  EXPECT_EQ(test::max_abs_diff(dtable, Tensor::zeros({11, 5}, DType::F32)), 0.0);  // nothing written
}

TEST(EmbeddingCpu, RejectsBadShapesAndDtypes) {
  Tensor table = random_tensor({11, 5}, DType::F32, 9);
  Tensor ids = ids_tensor({1, 2, 3});
  EXPECT_THROW(ops::embedding_forward(kCpu, table, ids, Tensor::empty({3, 4}, DType::F32)), Error);
  EXPECT_THROW(ops::embedding_forward(kCpu, table, ids, Tensor::empty({4, 5}, DType::F32)), Error);
  EXPECT_THROW(ops::embedding_forward(kCpu, table, ids, Tensor::empty({3, 5}, DType::F64)), Error);
  Tensor ids64 = Tensor::zeros({3}, DType::I64);
  EXPECT_THROW(ops::embedding_forward(kCpu, table, ids64, Tensor::empty({3, 5}, DType::F32)), Error);
  EXPECT_THROW(ops::embedding_backward(kCpu, ids, Tensor::empty({3, 6}, DType::F32), Tensor::zeros({11, 5}, DType::F32)),
               Error);
  EXPECT_THROW(ops::embedding_backward(kCpu, ids.reshape({3, 1}), Tensor::empty({3, 5}, DType::F32),
                                       Tensor::zeros({11, 5}, DType::F32)),
               Error);
}

}  // namespace
}  // namespace quill
