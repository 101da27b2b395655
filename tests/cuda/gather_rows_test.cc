// CUDA gather_rows (gather_rows.cu) against the CPU reference, bit for bit: rows of bf16 and f32 at
// the exchange's width (16-byte units), odd widths that force the 8-, 4-, 2- and 1-byte units, views
// that start a row into their buffer (misaligned), a permutation and an index that repeats rows,
// and the seed rank's regroup size (12,288 rows of 4,096). Outputs are poisoned and guarded.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "base/error.h"
#include "cuda/harness.h"
#include "ops/gather_rows.h"
#include "util/test_util.h"

namespace quill {
namespace {

using test::gpu_ctx;

const DeviceContext kCpu = DeviceContext::cpu();

Tensor index_tensor(const std::vector<int32_t>& v) {
  Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, DType::I32);
  std::memcpy(t.data(), v.data(), v.size() * sizeof(int32_t));
  return t;
}

// n rows drawn from [0, R): a shuffled permutation when n == R and `repeat` is false, else with repeats.
std::vector<int32_t> random_index(int64_t R, int64_t n, bool repeat, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> v(static_cast<size_t>(n));
  if (!repeat && n == R) {
    std::iota(v.begin(), v.end(), 0);
    std::shuffle(v.begin(), v.end(), rng);
  } else {
    for (auto& x : v) x = static_cast<int32_t>(rng() % R);
  }
  return v;
}

// Host source of `dtype` with random bytes (any bit pattern must survive the copy).
Tensor random_bytes(const Shape& shape, DType dtype, uint32_t seed) {
  Tensor t = Tensor::empty(shape, dtype);
  std::mt19937 rng(seed);
  auto* b = static_cast<unsigned char*>(t.data());
  for (size_t i = 0; i < t.nbytes(); ++i) b[i] = static_cast<unsigned char>(rng());
  return t;
}

// Copies host bytes into a guarded device buffer `offset` rows past its start (a misaligned view when
// the row's bytes are not a multiple of 16).
struct Placed {
  std::unique_ptr<test::GuardedDevice> buffer;
  Tensor view;
};
Placed place_bytes(const Tensor& host, int64_t offset) {
  Shape big = host.shape();
  big[0] += offset;
  Placed p;
  p.buffer = std::make_unique<test::GuardedDevice>(big, host.dtype());
  p.view = p.buffer->tensor().rows(offset, big[0]);
  EXPECT_EQ(cudaMemcpy(p.view.data(), host.data(), host.nbytes(), cudaMemcpyHostToDevice), cudaSuccess);
  return p;
}

void check_case(DType dtype, int64_t R, int64_t D, int64_t N, bool repeat, int64_t offset, uint32_t seed) {
  SCOPED_TRACE(std::string(dtype_name(dtype)) + " R=" + std::to_string(R) + " D=" + std::to_string(D) +
               " N=" + std::to_string(N) + (repeat ? " repeating" : "") + (offset ? " offset view" : ""));
  const Tensor src = random_bytes({R, D}, dtype, seed);
  const Tensor index = index_tensor(random_index(R, N, repeat, seed + 1));
  Tensor want = Tensor::empty({N, D}, dtype);
  ops::gather_rows(kCpu, src, index, want);

  Placed dsrc = place_bytes(src, offset);
  Tensor dindex = test::to_device(index, DType::I32);
  Placed dout = place_bytes(random_bytes({N, D}, dtype, seed + 2), offset);  // stale bytes, all overwritten
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const DeviceContext ctx = gpu_ctx();
  ops::gather_rows(ctx, dsrc.view, dindex, dout.view);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  Tensor got = Tensor::empty({N, D}, dtype);
  ASSERT_EQ(cudaMemcpy(got.data(), dout.view.data(), got.nbytes(), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(std::memcmp(got.data(), want.data(), want.nbytes()), 0) << "rows differ from the CPU's";
  EXPECT_TRUE(dsrc.buffer->guards_intact());
  EXPECT_TRUE(dout.buffer->guards_intact()) << "wrote outside dst";
}

TEST(CudaGatherRows, MatchesCpuBitForBit) {
  QUILL_REQUIRE_GPU();
  for (int64_t offset : {0, 1}) {
    check_case(DType::BF16, 96, 4096, 96, false, offset, 1);   // the exchange's rows: 16-byte units
    check_case(DType::BF16, 50, 4096, 80, true, offset, 2);    // repeats, more rows out than in
    check_case(DType::F32, 33, 100, 33, false, offset, 3);     // 400 bytes: 16-byte units when aligned
    check_case(DType::BF16, 17, 12, 17, false, offset, 4);     // 24 bytes: 8-byte units
    check_case(DType::BF16, 17, 6, 9, true, offset, 5);        // 12 bytes: 4-byte units
    check_case(DType::BF16, 17, 3, 17, false, offset, 6);      // 6 bytes: 2-byte units
    check_case(DType::U8, 17, 5, 17, false, offset, 7);        // 5 bytes: 1-byte units
  }
}

TEST(CudaGatherRows, SeedRankRegroupSize) {
  QUILL_REQUIRE_GPU();
  check_case(DType::BF16, 12288, 4096, 12288, false, 0, 11);
}

// gather_rows_from_pair: a's R rows and b's S rows seen as one source; `offset` misaligns the views.
void check_pair_case(DType dtype, int64_t R, int64_t S, int64_t D, int64_t offset, uint32_t seed) {
  SCOPED_TRACE(std::string("pair ") + dtype_name(dtype) + " R=" + std::to_string(R) + " S=" + std::to_string(S) +
               " D=" + std::to_string(D) + (offset ? " offset view" : ""));
  const Tensor a = random_bytes({R, D}, dtype, seed), b = random_bytes({S, D}, dtype, seed + 1);
  const Tensor index = index_tensor(random_index(R + S, R + S, false, seed + 2));  // a permutation of both
  Tensor want = Tensor::empty({R + S, D}, dtype);
  ops::gather_rows_from_pair(kCpu, a, b, index, want);

  Placed da = place_bytes(a, offset), db = place_bytes(b, 0);
  Tensor dindex = test::to_device(index, DType::I32);
  Placed dout = place_bytes(random_bytes({R + S, D}, dtype, seed + 3), offset);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ops::gather_rows_from_pair(gpu_ctx(), da.view, db.view, dindex, dout.view);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  Tensor got = Tensor::empty({R + S, D}, dtype);
  ASSERT_EQ(cudaMemcpy(got.data(), dout.view.data(), got.nbytes(), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(std::memcmp(got.data(), want.data(), want.nbytes()), 0) << "rows differ from the CPU's";
  EXPECT_TRUE(da.buffer->guards_intact());
  EXPECT_TRUE(db.buffer->guards_intact());
  EXPECT_TRUE(dout.buffer->guards_intact()) << "wrote outside dst";
}

TEST(CudaGatherRows, FromPairMatchesCpuBitForBit) {
  QUILL_REQUIRE_GPU();
  for (int64_t offset : {0, 1}) {
    check_pair_case(DType::BF16, 40, 56, 4096, offset, 21);  // two micro-batches' expert rows
    check_pair_case(DType::F32, 9, 0, 100, offset, 22);      // an empty second source
    check_pair_case(DType::BF16, 0, 13, 6, offset, 23);      // an empty first source, 4-byte units
    check_pair_case(DType::U8, 7, 5, 5, offset, 24);         // 1-byte units
  }
  check_pair_case(DType::BF16, 12288, 12288, 2048, 0, 25);   // a seed rank's pair of micro-batches
}

// regroup_index on the device against the CPU's, bit for bit: a seed rank's exchange (8 sources x 32 local experts,
// ~48 rows a block, some empty), more blocks than one launch's grid, and a single source.
TEST(CudaRegroupIndex, MatchesCpu) {
  QUILL_REQUIRE_GPU();
  std::mt19937 rng(31);
  for (auto [S, L, mean] : {std::tuple{8, 32, 48}, std::tuple{16, 128, 3}, std::tuple{1, 5, 7}}) {
    SCOPED_TRACE("S=" + std::to_string(S) + " L=" + std::to_string(L));
    Tensor counts = Tensor::empty({S, L}, DType::I64);
    int64_t R = 0;
    for (int64_t i = 0; i < S * L; ++i) R += counts.data_as<int64_t>()[i] = (rng() % 5 == 0) ? 0 : rng() % (2 * mean);
    Tensor want = Tensor::empty({2 * R}, DType::I32);
    ops::regroup_index(kCpu, counts, want);
    Tensor dcounts = test::to_device(counts, DType::I64);
    auto got = test::poisoned_output({2 * R}, DType::I32);
    ops::regroup_index(gpu_ctx(), dcounts, got->tensor());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const Tensor host = test::to_host(got->tensor());
    EXPECT_EQ(std::memcmp(host.data(), want.data(), want.nbytes()), 0) << "the index differs from the CPU's";
    EXPECT_TRUE(got->guards_intact()) << "wrote outside the index";
  }
}

TEST(CudaGatherRows, EmptyAndErrors) {
  QUILL_REQUIRE_GPU();
  const DeviceContext ctx = gpu_ctx();
  Tensor src = test::to_device(Tensor::zeros({4, 8}, DType::F32), DType::BF16);
  Tensor none = test::to_device(index_tensor({}), DType::I32);
  Tensor out0 = test::to_device(Tensor::zeros({0, 8}, DType::F32), DType::BF16);
  ops::gather_rows(ctx, src, none, out0);  // nothing to do, no launch
  Tensor idx = test::to_device(index_tensor({0, 1}), DType::I32);
  Tensor wrong = test::to_device(Tensor::zeros({3, 8}, DType::F32), DType::BF16);
  test::expect_error([&] { ops::gather_rows(ctx, src, idx, wrong); }, "gather_rows: dst is");
  test::expect_error([&] { ops::gather_rows(ctx, src, index_tensor({0, 1}), wrong.rows(0, 2)); },
                     "gather_rows: index must be a CUDA tensor");
}

}  // namespace
}  // namespace quill
