// Tensor::joined_rows: matrices that lie back to back in one storage seen as one (the attention
// projections' stacked GEMMs read their bucket's weights and gradients this way), and nothing else.
#include <gtest/gtest.h>

#include "tensor/tensor.h"

namespace quill {
namespace {

TEST(JoinedRows, BackToBackViewsOfOneStorageJoinAlongRows) {
  const Tensor flat = Tensor::empty({4 * 3 + 2 * 3 + 5 * 3}, DType::F32);
  for (int64_t i = 0; i < flat.numel(); ++i) flat.data_as<float>()[i] = static_cast<float>(i);
  const Tensor a = flat.view_flat(0, {4, 3}), b = flat.view_flat(12, {2, 3}), c = flat.view_flat(18, {5, 3});
  const Tensor j = Tensor::joined_rows({a, b, c});
  ASSERT_TRUE(j.defined());
  EXPECT_EQ(j.shape(), (Shape{11, 3}));
  EXPECT_EQ(j.data(), a.data());
  EXPECT_EQ(j.data_as<float>()[32], 32.0f);  // the last element of c
  EXPECT_EQ(Tensor::joined_rows({b, c}).shape(), (Shape{7, 3}));
  EXPECT_EQ(Tensor::joined_rows({a}).shape(), (Shape{4, 3}));
}

TEST(JoinedRows, AnythingElseIsUndefined) {
  const Tensor flat = Tensor::empty({40}, DType::F32);
  const Tensor a = flat.view_flat(0, {4, 3}), b = flat.view_flat(12, {2, 3});
  EXPECT_FALSE(Tensor::joined_rows({b, a}).defined());                          // out of order
  EXPECT_FALSE(Tensor::joined_rows({a, flat.view_flat(13, {2, 3})}).defined());  // a gap
  EXPECT_FALSE(Tensor::joined_rows({a, flat.view_flat(12, {3, 2})}).defined());  // other columns
  EXPECT_FALSE(Tensor::joined_rows({a, flat.view_flat(12, {6})}).defined());     // other rank
  const Tensor other = Tensor::empty({12}, DType::F32);
  EXPECT_FALSE(Tensor::joined_rows({a, other.view_flat(0, {2, 3})}).defined());  // another storage
  const Tensor halves = Tensor::empty({24}, DType::BF16);
  EXPECT_TRUE(Tensor::joined_rows({halves.view_flat(0, {4, 3}), halves.view_flat(12, {2, 3})}).defined());
  EXPECT_FALSE(Tensor::joined_rows({a, Tensor()}).defined());
  EXPECT_FALSE(Tensor::joined_rows({}).defined());
}

}  // namespace
}  // namespace quill
