// CUDA embedding (src/ops/cuda/embedding.cu) against the CPU reference. The table and dout are
// rounded through bf16 first so both backends see the same numbers; outputs are poisoned inside guard
// bands; dtable starts from nonzero contents and must come back as those plus the reference's sum.
// Shapes cover the 16-byte path (D % 8 == 0, aligned tensors: a group of up to 32 lanes per token,
// in the backward a lane per (id, unit) adding two 16-byte fp32 vectors) with 1, 8 and 32 lanes per token, the element
// path (other D, or a misaligned tensor), an id repeated at nearly every position (the backward's longest
// segment), and an id check that spans several check blocks.
// Legend: V vocabulary rows, D width, T tokens (with repeated ids, so backward adds rows up).
#include "ops/embedding.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <random>
#include <string>

#include "base/error.h"
#include "cuda/harness.h"
#include "util/test_util.h"

namespace quill {
namespace {

using test::expect_close;
using test::poisoned_output;
using test::random_tensor;
using test::round_bf16;
using test::to_device;
using test::to_guarded_device;
using test::to_host_f32;

using test::expect_error;

// T ids in [0, V), drawn from the first V/3 rows so that many repeat.
Tensor random_ids(int64_t T, int64_t V, uint32_t seed) {
  std::mt19937 rng(seed);
  Tensor ids = Tensor::empty({T}, DType::I32);
  const int64_t range = std::max<int64_t>(1, V / 3);
  for (int64_t t = 0; t < T; ++t) ids.data_as<int32_t>()[t] = static_cast<int32_t>(rng() % range);
  ids.data_as<int32_t>()[T - 1] = static_cast<int32_t>(V - 1);  // the last row too
  return ids;
}

struct Case {
  int64_t V, D, T;
};

class CudaEmbeddingTest : public ::testing::TestWithParam<Case> {};

TEST_P(CudaEmbeddingTest, ForwardMatchesCpu) {
  QUILL_REQUIRE_GPU();
  const Case c = GetParam();
  const Tensor table = round_bf16(random_tensor({c.V, c.D}, DType::F32, 11));
  const Tensor ids = random_ids(c.T, c.V, 12);
  Tensor ref = Tensor::empty({c.T, c.D}, DType::F32);
  ops::embedding_forward(DeviceContext::cpu(), table, ids, ref);

  const Tensor d_table = to_device(table, DType::BF16), d_ids = to_device(ids, DType::I32);
  auto out = poisoned_output({c.T, c.D}, DType::BF16);
  ops::embedding_forward(test::gpu_ctx(), d_table, d_ids, out->tensor());
  EXPECT_EQ(test::max_abs_diff(to_host_f32(out->tensor()), ref), 0.0) << "a lookup is an exact copy";
  EXPECT_TRUE(out->guards_intact()) << "out written outside its bounds";
}

TEST_P(CudaEmbeddingTest, BackwardAccumulatesLikeCpu) {
  QUILL_REQUIRE_GPU();
  const Case c = GetParam();
  const Tensor ids = random_ids(c.T, c.V, 21);
  const Tensor dout = round_bf16(random_tensor({c.T, c.D}, DType::F32, 22));
  const Tensor init = random_tensor({c.V, c.D}, DType::F32, 23, 0.5);
  Tensor ref = init.clone();
  ops::embedding_backward(DeviceContext::cpu(), ids, dout, ref);

  auto dtable = to_guarded_device(init, DType::F32);
  ops::embedding_backward(test::gpu_ctx(), to_device(ids, DType::I32), to_device(dout, DType::BF16), dtable->tensor());
  expect_close("dtable", to_host_f32(dtable->tensor()), ref, 1e-5);
  EXPECT_TRUE(dtable->guards_intact()) << "dtable written outside its bounds";
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaEmbeddingTest,
                         ::testing::Values(Case{1003, 200, 517},  // D % 8 == 0: 16-byte copies
                                           Case{257, 77, 300},    // odd D: element copies
                                           Case{5, 4096, 64},     // model width, every row repeated
                                           Case{1000, 4096, 3001},  // model width: 16 units a lane, many tokens
                                           Case{300, 8, 1001},    // one unit a row: a lane per token
                                           Case{300, 64, 1001},   // 8 lanes per token, 4 tokens per warp
                                           Case{40, 36, 999},     // D % 8 == 4: element path
                                           Case{3, 4096, 8192}));  // one id at 8,191 positions: the longest segment

// One tensor starts `misalign` bytes past a 16-byte boundary (the others aligned), which sends the
// op to its element path: the table or out (forward), dout or dtable (backward).
TEST(CudaEmbedding, MisalignedViewsMatchCpu) {
  QUILL_REQUIRE_GPU();
  const int64_t V = 700, D = 1024, T = 1000;
  const Tensor table = round_bf16(random_tensor({V, D}, DType::F32, 51));
  const Tensor ids = random_ids(T, V, 52);
  const Tensor dout = round_bf16(random_tensor({T, D}, DType::F32, 53));
  const Tensor init = random_tensor({V, D}, DType::F32, 54, 0.5);
  Tensor out_ref = Tensor::empty({T, D}, DType::F32), dtable_ref = init.clone();
  ops::embedding_forward(DeviceContext::cpu(), table, ids, out_ref);
  ops::embedding_backward(DeviceContext::cpu(), ids, dout, dtable_ref);
  const Tensor d_ids = to_device(ids, DType::I32);
  for (const char* which : {"table", "out", "dout", "dtable"}) {
    const std::string w = which;
    SCOPED_TRACE(w + " misaligned");
    auto off = [&](const char* name, size_t bytes) { return w == name ? bytes : size_t{0}; };
    auto d_table = to_guarded_device(table, DType::BF16, off("table", 2));
    auto out = poisoned_output({T, D}, DType::BF16, off("out", 8));
    ops::embedding_forward(test::gpu_ctx(), d_table->tensor(), d_ids, out->tensor());
    EXPECT_EQ(test::max_abs_diff(to_host_f32(out->tensor()), out_ref), 0.0) << "a lookup is an exact copy";
    EXPECT_TRUE(out->guards_intact()) << "out written outside its bounds";

    auto d_dout = to_guarded_device(dout, DType::BF16, off("dout", 2));
    auto dtable = to_guarded_device(init, DType::F32, off("dtable", 4));
    ops::embedding_backward(test::gpu_ctx(), d_ids, d_dout->tensor(), dtable->tensor());
    expect_close("dtable", to_host_f32(dtable->tensor()), dtable_ref, 1e-5);
    EXPECT_TRUE(dtable->guards_intact()) << "dtable written outside its bounds";
  }
}

TEST(CudaEmbedding, IdOutsideVocabularyNamesThePositionAndWritesNothing) {
  QUILL_REQUIRE_GPU();
  const int64_t V = 50, D = 24, T = 90;
  Tensor ids = random_ids(T, V, 31);
  ids.data_as<int32_t>()[61] = -1;
  ids.data_as<int32_t>()[37] = static_cast<int32_t>(V);
  const Tensor d_ids = to_device(ids, DType::I32);
  const Tensor table = to_device(random_tensor({V, D}, DType::F32, 32), DType::BF16);
  auto out = poisoned_output({T, D}, DType::BF16);
  expect_error([&] { ops::embedding_forward(test::gpu_ctx(), table, d_ids, out->tensor()); },
               "embedding_forward: token id 50 at position 37 is outside the vocabulary [0, 50)");

  const Tensor init = random_tensor({V, D}, DType::F32, 33);
  auto dtable = to_guarded_device(init, DType::F32);
  const Tensor dout = to_device(random_tensor({T, D}, DType::F32, 34), DType::BF16);
  expect_error([&] { ops::embedding_backward(test::gpu_ctx(), d_ids, dout, dtable->tensor()); },
               "embedding_backward: token id 50 at position 37");
  EXPECT_EQ(test::max_abs_diff(to_host_f32(dtable->tensor()), init), 0.0) << "dtable changed by a failed backward";
}

// Bad ids in several blocks of the check (64 blocks of 256 striding over 20,000 positions): the
// smallest position is named, whichever block found it.
TEST(CudaEmbedding, FirstBadIdAcrossCheckBlocks) {
  QUILL_REQUIRE_GPU();
  const int64_t V = 50, D = 8, T = 20000;
  Tensor ids = random_ids(T, V, 35);
  ids.data_as<int32_t>()[19999] = 77;
  ids.data_as<int32_t>()[16390] = -3;  // the same block as position 6 (16,384 threads in the grid)
  ids.data_as<int32_t>()[9000] = static_cast<int32_t>(V);
  const Tensor d_ids = to_device(ids, DType::I32);
  const Tensor table = to_device(random_tensor({V, D}, DType::F32, 36), DType::BF16);
  auto out = poisoned_output({T, D}, DType::BF16);
  expect_error([&] { ops::embedding_forward(test::gpu_ctx(), table, d_ids, out->tensor()); },
               "embedding_forward: token id 50 at position 9000 is outside the vocabulary [0, 50)");
  ids.data_as<int32_t>()[9000] = 0;
  const Tensor d_ids2 = to_device(ids, DType::I32);
  expect_error([&] { ops::embedding_forward(test::gpu_ctx(), table, d_ids2, out->tensor()); },
               "embedding_forward: token id -3 at position 16390");
}

TEST(CudaEmbedding, WrongDtypesAndShapesNameTheTensor) {
  QUILL_REQUIRE_GPU();
  const Tensor ids = to_device(random_ids(8, 10, 41), DType::I32);
  const Tensor table_f32 = to_device(random_tensor({10, 16}, DType::F32, 42), DType::F32);
  const Tensor table = to_device(random_tensor({10, 16}, DType::F32, 42), DType::BF16);
  auto out = poisoned_output({8, 16}, DType::BF16);
  expect_error([&] { ops::embedding_forward(test::gpu_ctx(), table_f32, ids, out->tensor()); },
               "embedding_forward: table has dtype F32, expected BF16");
  auto short_out = poisoned_output({7, 16}, DType::BF16);
  expect_error([&] { ops::embedding_forward(test::gpu_ctx(), table, ids, short_out->tensor()); },
               "embedding_forward: out has shape");
  const Tensor dtable_bf16 = to_device(random_tensor({10, 16}, DType::F32, 43), DType::BF16);
  const Tensor dout = to_device(random_tensor({8, 16}, DType::F32, 44), DType::BF16);
  expect_error([&] { ops::embedding_backward(test::gpu_ctx(), ids, dout, dtable_bf16); },
               "embedding_backward: dtable has dtype BF16, expected F32");
  const Tensor host_ids = random_ids(8, 10, 45);
  expect_error([&] { ops::embedding_forward(test::gpu_ctx(), table, host_ids, out->tensor()); },
               "embedding_forward: ids must be in GPU memory");
}

}  // namespace
}  // namespace quill
