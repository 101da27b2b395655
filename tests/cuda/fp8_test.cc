// The CUDA FP8 ops (src/ops/cuda/fp8_quantize.cu, fp8_gemm.cc) against the CPU reference of ops/fp8.h.
// Quantisation is compared bit for bit: the codes and factors of a weight (both copies), of activation
// rows and of transposed, grouped gradient columns, including partial 128-tiles, padded rows, an empty
// group, an all-zero tile and tiles holding an inf and a NaN. The GEMMs read exactly the CPU's quantised
// values, but Hopper's FP8 tensor cores accumulate a 128-element block's products with fewer bits than fp32
// before cuBLASLt promotes the block's sum (DeepSeek-V3, arXiv:2412.19437, section 3.3.2: "around 14 bits"
// on H800): measured on an H100 (2026-12-06, quill 0897167) the fp32 outputs are 1.2e-4 from the CPU's exact
// products summed in fp32, on every shape (dw that adds to a larger gradient less). So fp32 outputs are held
// to kTolFp8 = 5e-4 (a wrong factor of two or a code off by one step moves an output by 1/16 or more of its
// terms; the quantisers are compared bit for bit above), bf16 outputs to 1e-2 (their rounding dominates).
// Shapes: every weight dimension a multiple of 16 but not of 128, and row counts that are anything
// (37 tokens, experts of 0, 5, 16, 130 and 300 rows).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "base/error.h"
#include "cuda/harness.h"
#include "ops/cuda/fp8_quantize.h"
#include "ops/fp8.h"
#include "util/test_util.h"

namespace quill {
namespace {

using test::gpu_ctx;
using test::poisoned_output;
using test::to_device;
using test::to_guarded_device;
using test::to_host_f32;

const DeviceContext kCpu = DeviceContext::cpu();
constexpr int64_t kB = 128;
constexpr double kTolFp8 = 5e-4;  // fp32 outputs of the FP8 GEMMs (the header says why)
int64_t blocks(int64_t n) { return (n + kB - 1) / kB; }
int64_t pad4(int64_t n) { return (n + 3) / 4 * 4; }

void synced() { ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess); }

Tensor input(const Shape& shape, uint64_t seed, float scale = 1.0f) {
  Tensor t = test::random_tensor(shape, DType::F32, seed);
  for (int64_t i = 0; i < t.numel(); ++i) t.data_as<float>()[i] *= scale;
  return test::round_bf16(t);
}

std::vector<uint8_t> bytes_of(const Tensor& device_u8) {
  std::vector<uint8_t> out(static_cast<size_t>(device_u8.numel()));
  EXPECT_EQ(cudaMemcpy(out.data(), device_u8.data(), out.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  return out;
}
std::vector<float> floats_of(const void* device, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  EXPECT_EQ(cudaMemcpy(out.data(), device, out.size() * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  return out;
}
// Two factors agree bit for bit (NaN with NaN).
bool same(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0 || (std::isnan(a) && std::isnan(b)); }

// The weight's copy on the GPU from `w` as `dtype`: codes, codes_t and both factor arrays against the CPU's codes
// and factors, and the way back from either copy against the CPU's dequantisation.
void expect_weight_copy_bit_for_bit(const Tensor& w, DType dtype) {
  const int64_t E = w.dim(0), M = w.dim(1), K = w.dim(2);
  SCOPED_TRACE("w [" + std::to_string(E) + ", " + std::to_string(M) + ", " + std::to_string(K) + "] " +
               dtype_name(dtype));
  ops::Fp8Tensor ref = ops::fp8_empty(kCpu, {E, M, K}, ops::Fp8Tiling::kBlocks128);
  ops::fp8_quantize(kCpu, w, ref);

  const DeviceContext ctx = gpu_ctx();
  const Tensor wd = to_device(w, dtype);
  const ops::Fp8Tensor q = ops::fp8_empty(ctx, {E, M, K}, ops::Fp8Tiling::kBlocks128);
  synced();
  ops::fp8_quantize(ctx, wd, q);
  synced();
  const std::vector<uint8_t> codes = bytes_of(q.codes), codes_t = bytes_of(q.codes_t);
  const uint8_t* want = ref.codes.data_as<uint8_t>();
  int64_t bad = 0, bad_t = 0;
  for (int64_t e = 0; e < E; ++e)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t k = 0; k < K; ++k) {
        const uint8_t c = want[(e * M + m) * K + k];
        bad += codes[static_cast<size_t>((e * M + m) * K + k)] != c;
        bad_t += codes_t[static_cast<size_t>((e * K + k) * M + m)] != c;
      }
  EXPECT_EQ(bad, 0) << "codes differing from the CPU's";
  EXPECT_EQ(bad_t, 0) << "transposed codes differing from the CPU's";
  const std::vector<float> s = floats_of(q.scale_inv.data(), q.scale_inv.numel());
  const std::vector<float> st = floats_of(q.scale_inv_t.data(), q.scale_inv_t.numel());
  const float* want_s = ref.scale_inv.data_as<float>();
  const int64_t Mb = blocks(M), Kb = blocks(K);
  for (int64_t e = 0; e < E; ++e)
    for (int64_t i = 0; i < Mb; ++i)
      for (int64_t j = 0; j < Kb; ++j) {
        const float r = want_s[(e * Mb + i) * Kb + j];
        EXPECT_TRUE(same(s[static_cast<size_t>((e * Mb + i) * pad4(Kb) + j)], r)) << e << " " << i << " " << j;
        EXPECT_TRUE(same(st[static_cast<size_t>((e * Kb + j) * pad4(Mb) + i)], r)) << e << " " << i << " " << j;
      }

  // The way back, from either copy, is the CPU's dequantisation exactly.
  Tensor back = Tensor::empty({E, M, K}, DType::F32);
  ops::fp8_dequantize(kCpu, ref, Tensor(), back);
  auto out = poisoned_output({E, M, K}, DType::F32);
  auto out_t = poisoned_output({E, K, M}, DType::F32);
  ops::fp8_dequantize(ctx, q, Tensor(), out->tensor());
  ops::fp8_dequantize(ctx, q, Tensor(), out_t->tensor(), /*from_transpose=*/true);
  synced();
  const Tensor got = to_host_f32(out->tensor()), got_t = to_host_f32(out_t->tensor());
  int64_t differ = 0;
  for (int64_t e = 0; e < E; ++e)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t k = 0; k < K; ++k) {
        const float r = back.data_as<float>()[(e * M + m) * K + k];
        differ += !same(got.data_as<float>()[(e * M + m) * K + k], r);
        differ += !same(got_t.data_as<float>()[(e * K + k) * M + m], r);
      }
  EXPECT_EQ(differ, 0);
  EXPECT_TRUE(out->guards_intact() && out_t->guards_intact());
}

// Dimensions that are multiples of 16 (the vector kernel, every FP8 matrix of a model) from bf16 and fp32 weights,
// partial last blocks in both dimensions, a zero block, an infinity and a NaN; and dimensions that are not (the
// scalar kernel: quantisation takes them, the GEMMs refuse them below).
TEST(Fp8Cuda, WeightBlocksBitForBitBothCopies) {
  QUILL_REQUIRE_GPU();
  const int64_t E = 2, M = 144, K = 272;  // partial last blocks in both dimensions
  Tensor w = input({E, M, K}, 1);
  for (int64_t i = 0; i < kB; ++i)  // matrix 1, block (0, 1): all zero
    for (int64_t j = kB; j < 2 * kB; ++j) w.data_as<float>()[(M + i) * K + j] = 0.0f;
  w.data_as<float>()[5 * K + 7] = std::numeric_limits<float>::infinity();         // matrix 0, block (0, 0)
  w.data_as<float>()[(M + 130) * K + 260] = std::numeric_limits<float>::quiet_NaN();  // matrix 1, block (1, 2)
  ops::Fp8Tensor ref = ops::fp8_empty(kCpu, {E, M, K}, ops::Fp8Tiling::kBlocks128);
  ops::fp8_quantize(kCpu, w, ref);
  const float* want_s = ref.scale_inv.data_as<float>();
  EXPECT_TRUE(std::isnan(want_s[0]) && want_s[(blocks(M) + 0) * blocks(K) + 1] == 1.0f)
      << "the cases the test means to cover";
  expect_weight_copy_bit_for_bit(w, DType::BF16);
  expect_weight_copy_bit_for_bit(w, DType::F32);
  expect_weight_copy_bit_for_bit(input({3, 256, 4096}, 2), DType::BF16);  // whole blocks, a seed-like width
  expect_weight_copy_bit_for_bit(input({1, 150, 36}, 3), DType::BF16);    // neither dimension a multiple of 16
  expect_weight_copy_bit_for_bit(input({1, 150, 36}, 4), DType::F32);
}

// Activation rows (1x128 along the columns) in the padded row space of groups, and their transposed
// columns (128x1 per group): bit for bit the CPU's kRows128 and grouped kColumns128.
TEST(Fp8Cuda, ActivationRowsAndGradientColumnsBitForBitInThePaddedGroups) {
  QUILL_REQUIRE_GPU();
  const std::vector<int64_t> counts = {5, 0, 130, 16, 300};
  int64_t P = 0;
  for (int64_t c : counts) P += c;
  const int64_t C = 176;
  Tensor x = input({P, C}, 2, 3.0f);
  x.data_as<float>()[3 * C + 150] = std::numeric_limits<float>::quiet_NaN();  // row 3, tile 1; group 0's column 150
  Tensor counts_E = Tensor::empty({static_cast<int64_t>(counts.size())}, DType::I64);
  for (size_t e = 0; e < counts.size(); ++e) counts_E.data_as<int64_t>()[e] = counts[e];

  ops::Fp8Tensor rows = ops::fp8_empty(kCpu, {P, C}, ops::Fp8Tiling::kRows128);
  ops::fp8_quantize(kCpu, x, rows);
  ops::Fp8Tensor cols;
  cols.tiling = ops::Fp8Tiling::kColumns128;
  cols.codes = Tensor::empty({P, C}, DType::U8);
  cols.scale_inv = Tensor::empty(ops::fp8_grouped_scale_shape({P, C}, counts_E), DType::F32);
  ops::fp8_quantize_grouped(kCpu, x, counts_E, cols);

  const DeviceContext ctx = gpu_ctx();
  const cuda::fp8q::RowGroups g = cuda::fp8q::groups_of("test", counts.data(), static_cast<int64_t>(counts.size()));
  const int64_t Np = g.padded_total();
  ASSERT_EQ(Np, 16 + 0 + 144 + 16 + 304);
  const Tensor xd = to_device(x, DType::BF16);
  const Tensor codes = Tensor::empty({Np, C}, DType::U8, *ctx.allocator);
  const Tensor scale = Tensor::empty({Np * blocks(C)}, DType::F32, *ctx.allocator);
  const Tensor codes_t = Tensor::empty({C, Np}, DType::U8, *ctx.allocator);
  const Tensor scale_t = Tensor::empty({g.tile[g.count] * pad4(C)}, DType::F32, *ctx.allocator);
  synced();
  cuda::fp8q::quantize_rows(ctx, xd.data(), DType::BF16, C, g, codes.data_as<uint8_t>(), scale.data_as<float>());
  cuda::fp8q::quantize_columns_transposed(ctx, xd.data(), DType::BF16, C, g, codes_t.data_as<uint8_t>(),
                                          scale_t.data_as<float>());
  synced();
  const std::vector<uint8_t> rc = bytes_of(codes), cc = bytes_of(codes_t);
  const std::vector<float> rs = floats_of(scale.data(), scale.numel()), cs = floats_of(scale_t.data(), scale_t.numel());
  int64_t bad_rows = 0, bad_cols = 0, bad_pad = 0, bad_rs = 0, bad_cs = 0;
  int64_t cpu_tile = 0;
  for (int grp = 0; grp < g.count; ++grp) {
    const int64_t n = g.padded_rows(grp);
    for (int64_t r = 0; r < n; ++r) {
      const bool real = r < g.rows(grp);
      const int64_t src = g.src[grp] + r, d = g.dst[grp] + r;
      for (int64_t c = 0; c < C; ++c) {
        const size_t ri = static_cast<size_t>(d * C + c), ci = static_cast<size_t>(c * Np + d);
        if (!real) {
          bad_pad += rc[ri] != 0 || cc[ci] != 0;
          continue;
        }
        bad_rows += rc[ri] != rows.codes.data_as<uint8_t>()[src * C + c];
        bad_cols += cc[ci] != cols.codes.data_as<uint8_t>()[src * C + c];
      }
      for (int64_t j = 0; j < blocks(C); ++j) {
        const float got = rs[static_cast<size_t>(blocks(C) * g.dst[grp] + j * n + r)];
        bad_rs += real ? !same(got, rows.scale_inv.data_as<float>()[src * blocks(C) + j]) : got != 1.0f;
      }
    }
    for (int64_t t = 0; t < blocks(g.rows(grp)); ++t, ++cpu_tile)
      for (int64_t c = 0; c < C; ++c)
        bad_cs += !same(cs[static_cast<size_t>((g.tile[grp] + t) * pad4(C) + c)],
                        cols.scale_inv.data_as<float>()[cpu_tile * C + c]);
  }
  EXPECT_EQ(bad_rows, 0);
  EXPECT_EQ(bad_cols, 0);
  EXPECT_EQ(bad_pad, 0) << "padding rows must be zero codes";
  EXPECT_EQ(bad_rs, 0);
  EXPECT_EQ(bad_cs, 0);
  EXPECT_EQ(g.tile[g.count], cpu_tile);
}

// The dense ops: forward, backward input (written and accumulated) and backward weight (accumulated).
void check_dense(int64_t N, int64_t K, int64_t M, DType out, uint64_t seed) {
  const std::string tag = "fp8 linear ->" + std::string(dtype_name(out)) + " N=" + std::to_string(N) +
                          " K=" + std::to_string(K) + " M=" + std::to_string(M);
  SCOPED_TRACE(tag);
  const double tol = out == DType::BF16 ? 1e-2 : kTolFp8;
  const Tensor x = input({N, K}, seed), w = input({M, K}, seed + 1), dy = input({N, M}, seed + 2, 0.01f);
  const Tensor dx0 = input({N, K}, seed + 3), dw0 = test::random_tensor({M, K}, DType::F32, seed + 4);
  ops::Fp8Tensor wq = ops::fp8_empty(kCpu, {M, K}, ops::Fp8Tiling::kBlocks128);
  ops::fp8_quantize(kCpu, w, wq);
  Tensor y_ref = Tensor::empty({N, M}, DType::F32), dx_ref = Tensor::empty({N, K}, DType::F32);
  Tensor dx_acc_ref = dx0.clone(), dw_ref = dw0.clone();
  ops::fp8_linear_forward(kCpu, x, wq, y_ref);
  ops::fp8_linear_backward_input(kCpu, dy, wq, dx_ref);
  ops::fp8_linear_backward_input(kCpu, dy, wq, dx_acc_ref, /*accumulate=*/true);
  ops::fp8_linear_backward_weight(kCpu, dy, x, dw_ref);

  const DeviceContext ctx = gpu_ctx();
  const Tensor xd = to_device(x, DType::BF16), wd = to_device(w, DType::BF16), dyd = to_device(dy, DType::BF16);
  const ops::Fp8Tensor wdq = ops::fp8_empty(ctx, {M, K}, ops::Fp8Tiling::kBlocks128);
  auto y = poisoned_output({N, M}, out);
  auto dx = poisoned_output({N, K}, out);
  auto dx_acc = to_guarded_device(dx0, out);
  auto dw = to_guarded_device(dw0, DType::F32);
  synced();
  ops::fp8_quantize(ctx, wd, wdq);
  ops::fp8_linear_forward(ctx, xd, wdq, y->tensor());
  ops::fp8_linear_backward_input(ctx, dyd, wdq, dx->tensor());
  ops::fp8_linear_backward_input(ctx, dyd, wdq, dx_acc->tensor(), /*accumulate=*/true);
  ops::fp8_linear_backward_weight(ctx, dyd, xd, dw->tensor());
  synced();
  std::printf("%s\n", tag.c_str());
  test::expect_device_close(tag + " y", y->tensor(), y_ref, tol);
  test::expect_device_close(tag + " dx", dx->tensor(), dx_ref, tol);
  test::expect_device_close(tag + " dx (accumulate)", dx_acc->tensor(), dx_acc_ref, tol);
  test::expect_device_close(tag + " dw (+= onto nonzero dw)", dw->tensor(), dw_ref, kTolFp8);
  EXPECT_TRUE(y->guards_intact() && dx->guards_intact() && dx_acc->guards_intact() && dw->guards_intact());
}

TEST(Fp8Cuda, DenseGemmsAgainstTheCpuReference) {
  QUILL_REQUIRE_GPU();
  check_dense(37, 272, 144, DType::F32, 10);   // rows padded (37 -> 48), partial 128-blocks
  check_dense(256, 1024, 768, DType::F32, 20);  // no padding: the outputs written in place
  check_dense(37, 272, 144, DType::BF16, 30);
  check_dense(2048, 2048, 1536, DType::BF16, 40);
}

// The grouped ops over experts of 0, 5, 16, 130 and 300 rows (and one of 1): forward, backward input,
// backward weight written (the empty expert's dw zeroed) and accumulated (its dw untouched).
TEST(Fp8Cuda, GroupedGemmsAgainstTheCpuReference) {
  QUILL_REQUIRE_GPU();
  const std::vector<int64_t> counts = {5, 0, 130, 16, 300, 1};
  const int64_t E = static_cast<int64_t>(counts.size()), K = 272, M = 144;
  int64_t P = 0;
  for (int64_t c : counts) P += c;
  Tensor counts_E = Tensor::empty({E}, DType::I64);
  for (int64_t e = 0; e < E; ++e) counts_E.data_as<int64_t>()[e] = counts[static_cast<size_t>(e)];
  for (DType out : {DType::F32, DType::BF16}) {
    const std::string tag = std::string("fp8 grouped ->") + dtype_name(out);
    SCOPED_TRACE(tag);
    const double tol = out == DType::BF16 ? 1e-2 : kTolFp8;
    const Tensor x = input({P, K}, 50), w = input({E, M, K}, 51), dy = input({P, M}, 52, 0.01f);
    const Tensor dw0 = test::random_tensor({E, M, K}, DType::F32, 53);
    ops::Fp8Tensor wq = ops::fp8_empty(kCpu, {E, M, K}, ops::Fp8Tiling::kBlocks128);
    ops::fp8_quantize(kCpu, w, wq);
    Tensor y_ref = Tensor::empty({P, M}, DType::F32), dx_ref = Tensor::empty({P, K}, DType::F32);
    Tensor dw_ref = Tensor::empty({E, M, K}, DType::F32), dw_acc_ref = dw0.clone();
    ops::fp8_grouped_linear_forward(kCpu, x, wq, counts_E, y_ref);
    ops::fp8_grouped_linear_backward_input(kCpu, dy, wq, counts_E, dx_ref);
    ops::fp8_grouped_linear_backward_weight(kCpu, dy, x, counts_E, dw_ref, /*accumulate=*/false);
    ops::fp8_grouped_linear_backward_weight(kCpu, dy, x, counts_E, dw_acc_ref, /*accumulate=*/true);

    const DeviceContext ctx = gpu_ctx();
    const Tensor xd = to_device(x, DType::BF16), wd = to_device(w, DType::BF16), dyd = to_device(dy, DType::BF16);
    const ops::Fp8Tensor wdq = ops::fp8_empty(ctx, {E, M, K}, ops::Fp8Tiling::kBlocks128);
    auto y = poisoned_output({P, M}, out);
    auto dx = poisoned_output({P, K}, out);
    auto dw = poisoned_output({E, M, K}, DType::F32);
    auto dw_acc = to_guarded_device(dw0, DType::F32);
    synced();
    ops::fp8_quantize(ctx, wd, wdq);
    ops::fp8_grouped_linear_forward(ctx, xd, wdq, counts_E, y->tensor());
    ops::fp8_grouped_linear_backward_input(ctx, dyd, wdq, counts_E, dx->tensor());
    ops::fp8_grouped_linear_backward_weight(ctx, dyd, xd, counts_E, dw->tensor(), /*accumulate=*/false);
    ops::fp8_grouped_linear_backward_weight(ctx, dyd, xd, counts_E, dw_acc->tensor(), /*accumulate=*/true);
    synced();
    test::expect_device_close(tag + " y", y->tensor(), y_ref, tol);
    test::expect_device_close(tag + " dx", dx->tensor(), dx_ref, tol);
    test::expect_device_close(tag + " dw (written; the empty expert's zeroed)", dw->tensor(), dw_ref, kTolFp8);
    test::expect_device_close(tag + " dw (+=; the empty expert's untouched)", dw_acc->tensor(), dw_acc_ref, kTolFp8);
    EXPECT_TRUE(y->guards_intact() && dx->guards_intact() && dw->guards_intact() && dw_acc->guards_intact());
    // Expert 1 has no rows: its gradient written as zeros, or left exactly as it was.
    const Tensor w_got = to_host_f32(dw->tensor()), a_got = to_host_f32(dw_acc->tensor());
    int64_t not_zero = 0, moved = 0;
    for (int64_t i = M * K; i < 2 * M * K; ++i) {
      not_zero += w_got.data_as<float>()[i] != 0.0f;
      moved += a_got.data_as<float>()[i] != dw0.data_as<float>()[i];
    }
    EXPECT_EQ(not_zero, 0);
    EXPECT_EQ(moved, 0);
  }
}

TEST(Fp8Cuda, RefusesWeightDimensionsThatAreNotMultiplesOf16) {
  QUILL_REQUIRE_GPU();
  const DeviceContext ctx = gpu_ctx();
  const Tensor w = to_device(input({48, 36}, 60), DType::BF16), x = to_device(input({8, 36}, 61), DType::BF16);
  const ops::Fp8Tensor q = ops::fp8_empty(ctx, {48, 36}, ops::Fp8Tiling::kBlocks128);
  ops::fp8_quantize(ctx, w, q);
  const Tensor y = Tensor::empty({8, 48}, DType::BF16, *ctx.allocator);
  const std::string what = test::error_of([&] { ops::fp8_linear_forward(ctx, x, q, y); });
  EXPECT_NE(what.find("fp8_linear_forward: the weight's columns (K) is 36; the FP8 GEMMs need it a multiple of 16"),
            std::string::npos) << what;
}

}  // namespace
}  // namespace quill
