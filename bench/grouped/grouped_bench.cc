// Times the slice's routed-expert GEMMs (32 experts, hidden 4,096, expert width 2,048; gate/up
// 4,096 outputs after the gate/up split of docs/decisions/gate-up-layout.md) on given per-expert
// token counts: the grouped ops as the model calls them, and each expert's GEMM alone, so that a
// slow group size shows up. Not a test: a kernel-iteration tool for the GPU machine.
// Usage: grouped_bench [--no-fp8] COUNTS...   (32 non-negative integers; default: a measured step of the slice;
// --no-fp8 leaves the FP8 arms out, so that a new FP8 kernel that fails cannot cost the other arms their figures)
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "ops/cuda/cuda_context.h"
#include "ops/cuda/cuda_resources.h"
#include "ops/cuda/grouped_wgrad_wg.h"
#include "ops/cuda/kernels.h"
#include "ops/fp8.h"
#include "ops/linear.h"
#include "ops/moe.h"
#include "tensor/tensor.h"

#include "cuda_bench_util.h"

using namespace quill;
using bench::median_ms;
using bench::random_device;

namespace {

// Host time to issue one call (no synchronisation inside it), the median of five: when it is close to
// the GPU time, the GPU waits for the host (cuBLASLt's per-call descriptor and heuristic work). One
// sample alone is not enough: a single call measured 86 ms once (bench/results/2026-11-30-slice-v4)
// while the same calls inside a training step left 0.7 ms of gaps.
template <class F>
double host_issue_ms(cudaStream_t stream, F&& f) {
  std::vector<double> samples;
  for (int i = 0; i < 5; ++i) {
    cudaStreamSynchronize(stream);
    const auto t0 = std::chrono::steady_clock::now();
    f();
    const auto t1 = std::chrono::steady_clock::now();
    samples.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  cudaStreamSynchronize(stream);
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  // Layer 1 of the slice, step 4 of the gb1 run of bench/results/2026-11-30-slice-v3.
  std::vector<int64_t> counts = {1529, 576, 1804, 1170, 3136, 803, 3053, 1352, 2043, 1168, 879, 758, 1062, 1647, 963, 1790,
                                 1221, 1480, 856, 1120, 979, 2369, 558, 2589, 911, 3062, 1302, 2941, 1825, 1972, 934, 1300};
  bool fp8_arms = true;
  std::vector<int64_t> given;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--no-fp8") {
      fp8_arms = false;
      continue;
    }
    char* end = nullptr;
    const long long n = std::strtoll(argv[i], &end, 10);
    if (end == argv[i] || *end != '\0' || n < 0) {
      std::fprintf(stderr, "grouped_bench: '%s' is neither --no-fp8 nor a row count (usage: grouped_bench [--no-fp8] "
                   "COUNTS...)\n", argv[i]);
      return 2;
    }
    given.push_back(n);
  }
  if (!given.empty()) counts = given;
  const int64_t E = static_cast<int64_t>(counts.size()), D = 4096, F = 2048;
  int64_t P = 0;
  for (int64_t c : counts) P += c;
  CudaBackendOptions lt_options;  // the arms without a kernel name: cuBLASLt, one GEMM per expert
  lt_options.grouped_gemm_kernel = GroupedGemmKernel::kCublasLt;
  lt_options.grouped_wgrad_kernel = GroupedGemmKernel::kCublasLt;
  CudaBackend backend(0, lt_options);
  const DeviceContext ctx = backend.context();
  const cudaStream_t stream = stream_of(ctx);
  Tensor counts_host = Tensor::empty({E}, DType::I64);
  std::copy(counts.begin(), counts.end(), counts_host.data_as<int64_t>());
  const Tensor x = random_device(ctx, {P, D}, DType::BF16, 1), w13 = random_device(ctx, {E, 2 * F, D}, DType::BF16, 2),
               w2 = random_device(ctx, {E, D, F}, DType::BF16, 3), h = random_device(ctx, {P, F}, DType::BF16, 4),
               dy = random_device(ctx, {P, D}, DType::BF16, 5), dg = random_device(ctx, {P, 2 * F}, DType::BF16, 6);
  Tensor y13 = Tensor::empty({P, 2 * F}, DType::BF16, *ctx.allocator), y2 = Tensor::empty({P, D}, DType::BF16, *ctx.allocator),
         dh = Tensor::empty({P, F}, DType::BF16, *ctx.allocator), dx = Tensor::empty({P, D}, DType::BF16, *ctx.allocator),
         dw13 = Tensor::empty({E, 2 * F, D}, DType::F32, *ctx.allocator), dw2 = Tensor::empty({E, D, F}, DType::F32, *ctx.allocator);
  ops::zero(ctx, dw13);
  ops::zero(ctx, dw2);
  // GPU time on `s` (median by events) and the host time to issue the same call. Each backend's calls are timed on
  // its own stream (they do not order against another backend's).
  auto measure_on = [&](cudaStream_t s, const std::string& name, double flops, const std::function<void()>& call) {
    const double ms = median_ms(s, call, 7, 1);
    std::printf("%-58s %8.3f ms %7.1f TFLOP/s  host issue %7.3f ms\n", name.c_str(), ms, flops / ms / 1e9,
                host_issue_ms(s, call));
  };
  auto measure = [&](const char* name, double flops, const std::function<void()>& call) {
    measure_on(stream, name, flops, call);
  };
  const double f13 = 2.0 * P * D * 2 * F, f2 = 2.0 * P * F * D;
  measure("forward gate/up (K 4096 -> 4096)", f13, [&] { ops::grouped_linear_forward(ctx, x, w13, counts_host, y13); });
  measure("forward down (K 2048 -> 4096)", f2, [&] { ops::grouped_linear_forward(ctx, h, w2, counts_host, y2); });
  measure("backward input down (dy 4096 -> 2048)", f2, [&] { ops::grouped_linear_backward_input(ctx, dy, w2, counts_host, dh); });
  measure("backward input gate/up (4096 -> 4096)", f13, [&] { ops::grouped_linear_backward_input(ctx, dg, w13, counts_host, dx); });
  measure("backward weight down", f2, [&] { ops::grouped_linear_backward_weight(ctx, dy, h, counts_host, dw2); });
  measure("backward weight gate/up", f13, [&] { ops::grouped_linear_backward_weight(ctx, dg, x, counts_host, dw13); });
  measure("backward weight down (first write)", f2,
          [&] { ops::grouped_linear_backward_weight(ctx, dy, h, counts_host, dw2, false); });
  measure("backward weight gate/up (first write)", f13,
          [&] { ops::grouped_linear_backward_weight(ctx, dg, x, counts_host, dw13, false); });
  // The forward and input-gradient GEMMs by quill's wgmma kernel (CudaBackendOptions::grouped_gemm_kernel, one
  // launch for every expert), timed on its backend's own stream, and its outputs against cuBLASLt's (relative L2).
  {
    CudaBackendOptions wg_options;
    wg_options.grouped_gemm_kernel = GroupedGemmKernel::kWgmma;
    CudaBackend wg_backend(0, wg_options);
    const DeviceContext wg = wg_backend.context();
    const cudaStream_t wg_stream = stream_of(wg);
    auto wg_measure = [&](const char* name, double flops, const std::function<void()>& call) {
      measure_on(wg_stream, name, flops, call);
    };
    wg_measure("forward gate/up (wgmma)", f13, [&] { ops::grouped_linear_forward(wg, x, w13, counts_host, y13); });
    wg_measure("forward down (wgmma)", f2, [&] { ops::grouped_linear_forward(wg, h, w2, counts_host, y2); });
    wg_measure("backward input down (wgmma)", f2, [&] { ops::grouped_linear_backward_input(wg, dy, w2, counts_host, dh); });
    wg_measure("backward input gate/up (wgmma)", f13,
               [&] { ops::grouped_linear_backward_input(wg, dg, w13, counts_host, dx); });
    auto agreement = [&](const char* name, const Shape& shape, const std::function<void(const DeviceContext&, Tensor&)>& op) {
      Tensor a = Tensor::empty(shape, DType::BF16, *ctx.allocator), b = Tensor::empty(shape, DType::BF16, *ctx.allocator);
      op(ctx, a);
      cudaDeviceSynchronize();
      op(wg, b);
      cudaDeviceSynchronize();
      std::vector<uint16_t> ha(a.numel()), hb(b.numel());
      cudaMemcpy(ha.data(), a.data(), ha.size() * 2, cudaMemcpyDeviceToHost);
      cudaMemcpy(hb.data(), b.data(), hb.size() * 2, cudaMemcpyDeviceToHost);
      auto f = [](uint16_t v) {
        const uint32_t bits = static_cast<uint32_t>(v) << 16;
        float out;
        std::memcpy(&out, &bits, 4);
        return static_cast<double>(out);
      };
      double num = 0, den = 0;
      for (size_t i = 0; i < ha.size(); ++i) num += (f(hb[i]) - f(ha[i])) * (f(hb[i]) - f(ha[i])), den += f(ha[i]) * f(ha[i]);
      std::printf("%s, wgmma against cuBLASLt: relative L2 %.3g\n", name, den > 0 ? std::sqrt(num / den) : 0.0);
    };
    // FP8 (--fp8-format e4m3 --fp8-recipe blockwise): the weights quantised once per backend, the activations inside
    // each op; cuBLASLt's block-scaled GEMM per expert against quill's wgmma kernel.
    for (const DeviceContext* c : {&ctx, &wg}) {
      if (!fp8_arms) break;
      const std::string tag = c == &ctx ? " (cuBLASLt)" : " (wgmma)";
      const ops::Fp8Tensor q13 = ops::fp8_empty(*c, {E, 2 * F, D}, ops::Fp8Tiling::kBlocks128);
      const ops::Fp8Tensor q2 = ops::fp8_empty(*c, {E, D, F}, ops::Fp8Tiling::kBlocks128);
      ops::fp8_quantize(*c, w13, q13);
      ops::fp8_quantize(*c, w2, q2);
      const cudaStream_t s = stream_of(*c);
      auto m = [&](const std::string& name, double flops, const std::function<void()>& call) {
        measure_on(s, name, flops, call);
      };
      m("fp8 forward gate/up" + tag, f13,
        [&] { ops::fp8_grouped_linear_forward(*c, x, q13, counts_host, y13); });
      m("fp8 forward down" + tag, f2, [&] { ops::fp8_grouped_linear_forward(*c, h, q2, counts_host, y2); });
      m("fp8 backward input down" + tag, f2,
        [&] { ops::fp8_grouped_linear_backward_input(*c, dy, q2, counts_host, dh); });
      m("fp8 backward input gate/up" + tag, f13,
        [&] { ops::fp8_grouped_linear_backward_input(*c, dg, q13, counts_host, dx); });
    }
    agreement("forward gate/up", {P, 2 * F}, [&](const DeviceContext& c, Tensor& out) {
      ops::grouped_linear_forward(c, x, w13, counts_host, out);
    });
    agreement("backward input gate/up", {P, D}, [&](const DeviceContext& c, Tensor& out) {
      ops::grouped_linear_backward_input(c, dg, w13, counts_host, out);
    });
  }
  // The same two weight gradients by quill's wgmma kernel (CudaBackendOptions::grouped_wgrad_kernel), accumulating
  // (the 2nd-8th micro-batch of a step) and writing (the 1st), and its dw against cuBLASLt's (relative L2).
  {
    CudaBackendOptions wg_options;
    wg_options.grouped_wgrad_kernel = GroupedGemmKernel::kWgmma;
    CudaBackend wg_backend(0, wg_options);
    const DeviceContext wg = wg_backend.context();
    const cudaStream_t wg_stream = stream_of(wg);
    // Timed on the wgmma backend's own stream (its calls do not order against the default backend's).
    auto wg_measure = [&](const char* name, double flops, const std::function<void()>& call) {
      measure_on(wg_stream, name, flops, call);
    };
    wg_measure("backward weight down (wgmma)", f2, [&] { ops::grouped_linear_backward_weight(wg, dy, h, counts_host, dw2); });
    wg_measure("backward weight gate/up (wgmma)", f13,
               [&] { ops::grouped_linear_backward_weight(wg, dg, x, counts_host, dw13); });
    wg_measure("backward weight down (wgmma, first write)", f2,
               [&] { ops::grouped_linear_backward_weight(wg, dy, h, counts_host, dw2, false); });
    wg_measure("backward weight gate/up (wgmma, first write)", f13,
               [&] { ops::grouped_linear_backward_weight(wg, dg, x, counts_host, dw13, false); });
    measure("backward weight gate/up (cuBLASLt, first write)", f13,
            [&] { ops::grouped_linear_backward_weight(ctx, dg, x, counts_host, dw13, false); });
    // Each form of the kernel (grouped_wgrad_wg.h: Form; the arms above run the op's, --grouped-wgrad-form's default),
    // called directly.
    using cuda::grouped_wgrad::Form;
    for (auto [form, name] : {std::pair{Form::kHalf, "half staging"}, std::pair{Form::kQuarter, "quarter staging"},
                              std::pair{Form::kPingpong, "ping-pong"}}) {
      auto by_form = [&, form = form](const Tensor& d, const Tensor& in, const Tensor& dw, bool accumulate) {
        cuda::grouped_wgrad::backward_weight(wg, d.data(), in.data(), counts_host.data_as<int64_t>(), E, P, d.dim(1),
                                             in.dim(1), dw.data_as<float>(), accumulate, nullptr, form);
      };
      const std::string tag = std::string(" (wgmma, ") + name;
      wg_measure(("backward weight down" + tag + ")").c_str(), f2, [&] { by_form(dy, h, dw2, true); });
      wg_measure(("backward weight gate/up" + tag + ")").c_str(), f13, [&] { by_form(dg, x, dw13, true); });
      wg_measure(("backward weight down" + tag + ", first write)").c_str(), f2, [&] { by_form(dy, h, dw2, false); });
      wg_measure(("backward weight gate/up" + tag + ", first write)").c_str(), f13,
                 [&] { by_form(dg, x, dw13, false); });
    }
    // Agreement: both write the gate/up gradient from the same operands, then compare on the host.
    Tensor a = Tensor::empty({E, 2 * F, D}, DType::F32, *ctx.allocator);
    ops::grouped_linear_backward_weight(ctx, dg, x, counts_host, dw13, false);
    ops::grouped_linear_backward_weight(wg, dg, x, counts_host, a, false);
    cudaDeviceSynchronize();
    std::vector<float> ha(a.numel()), hb(dw13.numel());
    cudaMemcpy(ha.data(), a.data(), ha.size() * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(hb.data(), dw13.data(), hb.size() * 4, cudaMemcpyDeviceToHost);
    double num = 0, den = 0;
    for (size_t i = 0; i < ha.size(); ++i) num += double(ha[i] - hb[i]) * (ha[i] - hb[i]), den += double(hb[i]) * hb[i];
    std::printf("gate/up dw, wgmma against cuBLASLt: relative L2 %.3g\n", den > 0 ? std::sqrt(num / den) : 0.0);
  }
  // Each expert alone, backward input of the down projection (the slowest grouped op in the gb1 profile).
  std::printf("per expert, backward input down: rows ms TFLOP/s\n");
  for (int64_t e = 0, row = 0; e < E; row += counts[e], ++e) {
    if (counts[e] == 0) continue;
    const Tensor dy_e = dy.rows(row, row + counts[e]), dh_e = dh.rows(row, row + counts[e]);
    Tensor w_e = w2.reshape({E * D, F}).rows(e * D, (e + 1) * D);
    const double ms = median_ms(stream, [&] { ops::linear_backward_input(ctx, dy_e, w_e, dh_e); }, 7, 1);
    std::printf("  %2lld %6lld %7.3f %7.1f\n", static_cast<long long>(e), static_cast<long long>(counts[e]), ms,
                2.0 * counts[e] * F * D / ms / 1e9);
  }
  // The weight gradient's cuBLASLt algorithms (issue 23: the grouped weight gradient ran at 494 TFLOP/s when it
  // accumulates into the fp32 gradient, 597 when it writes it): one expert's gate/up at the slice's mean rows per
  // expert (1,536) and at the seed's EP8 rank's (384), writing (beta 0) and accumulating (beta 1), with each of the
  // heuristic's first eight algorithms; candidate 0 is the one quill runs.
  std::printf("backward weight gate/up, one expert: rows beta candidate ms TFLOP/s config\n");
  Tensor dw_e = Tensor::empty({2 * F, D}, DType::F32, *ctx.allocator);
  ops::zero(ctx, dw_e);
  for (int64_t rows : {int64_t{1536}, int64_t{384}}) {
    const Tensor dg_e = dg.rows(0, std::min(rows, P)), x_e = x.rows(0, std::min(rows, P));
    for (bool accumulate : {false, true}) {
      for (int i = 0; i < 8; ++i) {
        std::string config;
        if (!cuda::linear_backward_weight_candidate(ctx, dg_e, x_e, dw_e, accumulate, i, &config)) break;
        const double ms = median_ms(
            stream, [&] { cuda::linear_backward_weight_candidate(ctx, dg_e, x_e, dw_e, accumulate, i, nullptr); }, 7, 1);
        std::printf("  %5lld %d %d %8.4f %7.1f  %s\n", static_cast<long long>(dg_e.dim(0)), accumulate ? 1 : 0, i, ms,
                    2.0 * dg_e.dim(0) * 2 * F * D / ms / 1e9, config.c_str());
      }
    }
  }
  return 0;
}
