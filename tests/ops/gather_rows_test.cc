// CPU gather_rows and gather_rows_from_pair (ops/cpu/gather_rows.cc): rows copied by index, any dtype; bad
// indexes and shapes named in the error. regroup_index: the expert exchange's two orders, worked by hand.
#include "ops/gather_rows.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "util/test_util.h"

namespace quill {
namespace {

const DeviceContext kCpu = DeviceContext::cpu();

Tensor index_tensor(const std::vector<int32_t>& v) {
  Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, DType::I32);
  std::memcpy(t.data(), v.data(), v.size() * sizeof(int32_t));
  return t;
}

TEST(GatherRows, CopiesRowsByIndex) {
  Tensor src = Tensor::empty({4, 3}, DType::F32);
  for (int64_t i = 0; i < 12; ++i) src.data_as<float>()[i] = static_cast<float>(i);
  Tensor dst = Tensor::zeros({5, 3}, DType::F32);
  ops::gather_rows(kCpu, src, index_tensor({3, 0, 0, 2, 1}), dst);
  const std::vector<float> want = {9, 10, 11, 0, 1, 2, 0, 1, 2, 6, 7, 8, 3, 4, 5};
  EXPECT_EQ(std::vector<float>(dst.data_as<float>(), dst.data_as<float>() + 15), want);
}

TEST(GatherRows, AnyDtypeBitForBit) {
  Tensor src = Tensor::empty({3, 2}, DType::I64);
  for (int64_t i = 0; i < 6; ++i) src.data_as<int64_t>()[i] = (int64_t{1} << 40) + i;
  Tensor dst = Tensor::zeros({2, 2}, DType::I64);
  ops::gather_rows(kCpu, src, index_tensor({2, 1}), dst);
  EXPECT_EQ(dst.data_as<int64_t>()[0], (int64_t{1} << 40) + 4);
  EXPECT_EQ(dst.data_as<int64_t>()[3], (int64_t{1} << 40) + 3);
}

TEST(GatherRows, EmptyIndexWritesNothing) {
  Tensor src = Tensor::zeros({2, 4}, DType::F32);
  Tensor dst = Tensor::zeros({0, 4}, DType::F32);
  ops::gather_rows(kCpu, src, index_tensor({}), dst);
}

TEST(GatherRows, ErrorsNameTheProblem) {
  Tensor src = Tensor::zeros({2, 4}, DType::F32);
  test::expect_error([&] { ops::gather_rows(kCpu, src, index_tensor({0, 2}), Tensor::zeros({2, 4}, DType::F32)); },
                     "gather_rows: index[1] is 2, outside the 2 rows of src");
  test::expect_error([&] { ops::gather_rows(kCpu, src, index_tensor({-1}), Tensor::zeros({1, 4}, DType::F32)); },
                     "gather_rows: index[0] is -1");
  test::expect_error([&] { ops::gather_rows(kCpu, src, index_tensor({0}), Tensor::zeros({1, 3}, DType::F32)); },
                     "gather_rows: dst is F32[1, 3] cpu, expected [1, 4] F32");
  test::expect_error([&] { ops::gather_rows(kCpu, src, index_tensor({0}), Tensor::zeros({1, 4}, DType::BF16)); },
                     "gather_rows: dst is");
  Tensor i64 = Tensor::zeros({1}, DType::I64);
  test::expect_error([&] { ops::gather_rows(kCpu, src, i64, Tensor::zeros({1, 4}, DType::F32)); }, "index has dtype I64");
}

Tensor counts_tensor(int64_t S, int64_t L, const std::vector<int64_t>& v) {
  Tensor t = Tensor::empty({S, L}, DType::I64);
  std::memcpy(t.data(), v.data(), v.size() * sizeof(int64_t));
  return t;
}

// Two sources, two local experts: received rows in source order are s0e0 (2 rows: 0, 1), s0e1 (1: 2), s1e0 (0),
// s1e1 (3: 3, 4, 5). Expert order: e0's s0 rows (0, 1), then e1's s0 row (2) and s1 rows (3, 4, 5).
TEST(RegroupIndex, BothOrdersByHand) {
  Tensor index = Tensor::zeros({12}, DType::I32);
  ops::regroup_index(kCpu, counts_tensor(2, 2, {2, 1, 0, 3}), index);
  const std::vector<int32_t> got(index.data_as<int32_t>(), index.data_as<int32_t>() + 12);
  EXPECT_EQ(got, (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5}));
  // Three sources, two experts: s0 (1, 1), s1 (2, 0), s2 (0, 1): source order rows s0e0 0, s0e1 1, s1e0 2 3,
  // s2e1 4; expert order e0: 0 (s0), 2 3 (s1); e1: 1 (s0), 4 (s2).
  Tensor index3 = Tensor::zeros({10}, DType::I32);
  ops::regroup_index(kCpu, counts_tensor(3, 2, {1, 1, 2, 0, 0, 1}), index3);
  const std::vector<int32_t> got3(index3.data_as<int32_t>(), index3.data_as<int32_t>() + 10);
  EXPECT_EQ(got3, (std::vector<int32_t>{0, 2, 3, 1, 4, /* inverse */ 0, 3, 1, 2, 4}));
}

TEST(RegroupIndex, ErrorsNameTheProblem) {
  test::expect_error([&] { ops::regroup_index(kCpu, counts_tensor(1, 2, {2, -1}), Tensor::zeros({2}, DType::I32)); },
                     "regroup_index: counts[0, 1] is -1, expected >= 0");
  test::expect_error([&] { ops::regroup_index(kCpu, counts_tensor(1, 2, {2, 1}), Tensor::zeros({4}, DType::I32)); },
                     "regroup_index: index has 4 entries, expected 2 x 3 (the counts' sum)");
  test::expect_error([&] { ops::regroup_index(kCpu, Tensor::zeros({2}, DType::I64), Tensor::zeros({0}, DType::I32)); },
                     "regroup_index: counts must be 2-D [S, L]");
}

TEST(GatherRowsFromPair, IndexesPastTheFirstSourceReadTheSecond) {
  Tensor a = Tensor::empty({2, 2}, DType::F32), b = Tensor::empty({3, 2}, DType::F32);
  for (int64_t i = 0; i < 4; ++i) a.data_as<float>()[i] = static_cast<float>(i);         // rows 0, 1
  for (int64_t i = 0; i < 6; ++i) b.data_as<float>()[i] = static_cast<float>(100 + i);   // rows 2, 3, 4
  Tensor dst = Tensor::zeros({5, 2}, DType::F32);
  ops::gather_rows_from_pair(kCpu, a, b, index_tensor({2, 0, 4, 1, 3}), dst);
  const std::vector<float> want = {100, 101, 0, 1, 104, 105, 2, 3, 102, 103};
  EXPECT_EQ(std::vector<float>(dst.data_as<float>(), dst.data_as<float>() + 10), want);
}

TEST(GatherRowsFromPair, EitherSourceMayBeEmpty) {
  Tensor none = Tensor::empty({0, 2}, DType::F32), b = Tensor::empty({1, 2}, DType::F32);
  b.data_as<float>()[0] = 7;
  b.data_as<float>()[1] = 8;
  Tensor dst = Tensor::zeros({2, 2}, DType::F32);
  ops::gather_rows_from_pair(kCpu, none, b, index_tensor({0, 0}), dst);
  EXPECT_EQ(std::vector<float>(dst.data_as<float>(), dst.data_as<float>() + 4), (std::vector<float>{7, 8, 7, 8}));
  Tensor back = Tensor::zeros({1, 2}, DType::F32);
  ops::gather_rows_from_pair(kCpu, b, none, index_tensor({0}), back);
  EXPECT_EQ(back.data_as<float>()[1], 8);
}

TEST(GatherRowsFromPair, ErrorsNameTheProblem) {
  Tensor a = Tensor::zeros({2, 4}, DType::F32), b = Tensor::zeros({1, 4}, DType::F32);
  test::expect_error([&] { ops::gather_rows_from_pair(kCpu, a, b, index_tensor({3}), Tensor::zeros({1, 4}, DType::F32)); },
                     "gather_rows_from_pair: index[0] is 3, outside the 2 + 1 rows of a and b");
  test::expect_error(
      [&] { ops::gather_rows_from_pair(kCpu, a, Tensor::zeros({1, 3}, DType::F32), index_tensor({0}),
                                       Tensor::zeros({1, 4}, DType::F32)); },
      "gather_rows_from_pair: b is F32[1, 3] cpu, expected [*, 4] F32 like a");
  test::expect_error([&] { ops::gather_rows_from_pair(kCpu, a, b, index_tensor({0}), Tensor::zeros({2, 4}, DType::F32)); },
                     "gather_rows_from_pair: dst is F32[2, 4] cpu, expected [1, 4] F32");
}

}  // namespace
}  // namespace quill
