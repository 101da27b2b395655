// Times the CUDA attention forward and backward on the slice's shapes (T = 8,192, 32 query heads,
// 8 kv heads, head dim 128, bias rank 16): a local layer (window 512, E = 512) and a global one
// (full causal, E = 1,024, log scaling). Prints the median of 10 timed calls after 3 warm-up
// calls, CUDA events on the backend's stream, and the achieved TFLOP/s (causal or windowed pairs
// counted once: forward 4 * pairs * d, backward 10 * pairs * d, the FLOP convention of
// bench/slice/ceilings.py's per-op table). Not a test: a kernel-iteration tool for the GPU
// machine. Usage: attention_bench [T] [--no-wgmma] [--no-wgmma-forward] [--heads Q:KV]
// (--heads 8:2: one TP4 rank of the seed's layout; default 32:8, the slice).
// The first row of each layer is what ops::attention_forward / attention_backward run (the wgmma kernels for a
// global layer on sm_90, mma.sync for a local one: src/ops/cuda/attention_wg.h). Then both kernels of each
// direction on their own ("forward mma.sync", "forward wgmma", "forward wgmma wide" [the form on trial,
// --attention-forward-form wide], "backward mma.sync", "backward wgmma", "backward wgmma producer" [the form on trial,
// --attention-backward-form producer]), the wgmma
// rows with their largest differences from the mma.sync ones on the same inputs (a full-size self-check before
// the figure is believed). --no-wgmma leaves those rows out, --no-wgmma-forward only the forward's.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "ops/attention.h"
#include "ops/convert.h"
#include "ops/cuda/attention_bias_rows.h"
#include "ops/cuda/attention_wg.h"
#include "ops/cuda/cuda_context.h"
#include "ops/cuda/cuda_resources.h"
#include "tensor/tensor.h"

#include "cuda_bench_util.h"

using namespace quill;
using bench::median_ms;
using bench::random_device;

namespace {

// Largest |a - b| over two device tensors of one shape (bf16 or fp32), on the host.
double max_abs_diff(const DeviceContext& ctx, const Tensor& a, const Tensor& b) {
  auto host = [&](const Tensor& t) {
    Tensor h = Tensor::empty(t.shape(), t.dtype());
    ops::transfer(ctx, t, h);
    return convert_dtype(h, DType::F32);
  };
  const Tensor ha = host(a), hb = host(b);
  double worst = 0;
  for (int64_t i = 0; i < ha.numel(); ++i) {
    const double d = std::fabs(static_cast<double>(ha.data_as<float>()[i]) - hb.data_as<float>()[i]);
    if (!(d <= worst)) worst = d;  // NaN sticks
  }
  return worst;
}

double pairs(int64_t T, int64_t window) {
  double n = 0;
  for (int64_t t = 0; t < T; ++t) n += static_cast<double>(window > 0 ? std::min(t + 1, window) : t + 1);
  return n;
}

}  // namespace

int run(int argc, char** argv) {
  int64_t T = 8192;
  bool wgmma_rows = true, wgmma_forward_rows = true;
  long long heads_q = 32, heads_kv = 8;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--no-wgmma") wgmma_rows = false;
    else if (std::string(argv[i]) == "--no-wgmma-forward") wgmma_forward_rows = false;
    else if (std::string(argv[i]) == "--heads" && i + 1 < argc) {
      // q:kv heads, e.g. 8:2 for one TP4 rank of the seed's layout (32:8 split four ways).
      if (std::sscanf(argv[++i], "%lld:%lld", &heads_q, &heads_kv) != 2 || heads_q <= 0 || heads_kv <= 0 ||
          heads_q % heads_kv != 0) {
        std::fprintf(stderr, "attention_bench: --heads wants Q:KV with Q a multiple of KV, got '%s'\n", argv[i]);
        return 2;
      }
    } else {
      char* end = nullptr;
      T = std::strtoll(argv[i], &end, 10);
      if (end == argv[i] || *end != '\0' || T <= 0) {
        std::fprintf(stderr, "attention_bench: unknown argument '%s' (usage: attention_bench [T] [--no-wgmma] "
                     "[--no-wgmma-forward] [--heads Q:KV])\n", argv[i]);
        return 2;
      }
    }
  }
  const int64_t H = heads_q, G = heads_kv, d = 128, R = 16;
  std::printf("attention_bench: %lld q / %lld kv heads, head dim %lld, R %lld\n", heads_q, heads_kv, static_cast<long long>(d),
              static_cast<long long>(R));
  CudaBackend backend(0);
  const DeviceContext ctx = backend.context();
  const cudaStream_t stream = stream_of(ctx);
  struct Layer {
    const char* name;
    int64_t window, E;
    bool log_scaling;
  };
  for (const Layer& layer : {Layer{"local (window 512, E 512)", 512, 512, false},
                             Layer{"global (causal, E 1024, log scaling)", 0, 1024, true}}) {
    ops::AttentionParams p;
    p.window = layer.window;
    p.scale = 1.0 / static_cast<double>(d);
    p.log_scaling = layer.log_scaling;
    p.log_floor = 4096.0;
    const Tensor q = random_device(ctx, {T, H, d}, DType::BF16, 1, 1.0f), k = random_device(ctx, {T, G, d}, DType::BF16, 2, 1.0f),
                 v = random_device(ctx, {T, G, d}, DType::BF16, 3, 1.0f), r = random_device(ctx, {T, H, R}, DType::BF16, 4, 1.0f),
                 table = random_device(ctx, {R, layer.E}, DType::F32, 5, 0.3f),
                 dout = random_device(ctx, {T, H, d}, DType::BF16, 6, 1.0f);
    Tensor out = Tensor::empty({T, H, d}, DType::BF16, *ctx.allocator), lse = Tensor::empty({H, T}, DType::F32, *ctx.allocator);
    Tensor dq = Tensor::empty({T, H, d}, DType::BF16, *ctx.allocator), dk = Tensor::empty({T, G, d}, DType::BF16, *ctx.allocator),
           dv = Tensor::empty({T, G, d}, DType::BF16, *ctx.allocator), dr = Tensor::empty({T, H, R}, DType::BF16, *ctx.allocator),
           dtable = Tensor::empty({R, layer.E}, DType::F32, *ctx.allocator);
    const double fwd = median_ms(stream, [&] { ops::attention_forward(ctx, q, k, v, r, table, p, out, lse); });
    const double bwd = median_ms(stream, [&] {
      ops::attention_backward(ctx, q, k, v, r, table, p, out, lse, dout, dq, dk, dv, dr, dtable);
    });
    const double n = pairs(T, layer.window) * static_cast<double>(H);
    std::printf("%-40s T=%lld  forward %8.3f ms %7.1f TFLOP/s   backward %8.3f ms %7.1f TFLOP/s\n", layer.name,
                static_cast<long long>(T), fwd, 4.0 * n * d / fwd / 1e9, bwd, 10.0 * n * d / bwd / 1e9);
    // The table frozen (Miles's default; the model passes no dtable): the table's gradient GEMM left out.
    const double frozen = median_ms(stream, [&] {
      ops::attention_backward(ctx, q, k, v, r, table, p, out, lse, dout, dq, dk, dv, dr, Tensor());
    });
    std::printf("%-40s T=%lld  backward, table frozen %8.3f ms %7.1f TFLOP/s\n", layer.name, static_cast<long long>(T),
                frozen, 10.0 * n * d / frozen / 1e9);
    {  // The bias rows (rb = r table) and dr = drb table^T on each path (attn_bias::BiasRowsPath), called directly.
      Tensor rb = Tensor::empty({T, H, layer.E}, DType::F32, *ctx.allocator);
      const Tensor drb = random_device(ctx, {T, H, layer.E}, DType::F32, 7, 1.0f);
      const double gb = static_cast<double>(rb.nbytes()) / 1e9;
      for (auto [path, name] : {std::pair{cuda::attn_bias::BiasRowsPath::kCublasLt, "cuBLASLt"},
                                std::pair{cuda::attn_bias::BiasRowsPath::kKernels, "kernels"}}) {
        const double rows_ms =
            median_ms(stream, [&] { cuda::attn_bias::bias_rows(ctx, T, H, R, layer.E, r, table, rb, path); });
        const double dr_ms = median_ms(stream, [&] {
          cuda::attn_bias::bias_rows_backward(ctx, T, H, R, layer.E, r, table, drb, dr, Tensor(), path);
        });
        std::printf("%-40s T=%lld  bias rows (%s) %7.3f ms %6.0f GB/s   dr %7.3f ms %6.0f GB/s\n", layer.name,
                    static_cast<long long>(T), name, rows_ms, gb / rows_ms * 1e3, dr_ms, gb / dr_ms * 1e3);
      }
    }
    if (!wgmma_rows || !cuda::attn_wg::device_supported()) continue;
    std::fflush(stdout);
    if (wgmma_forward_rows) {
      const double mma = median_ms(stream, [&] {
        cuda::attn_wg::attention_forward_mma_sync(ctx, q, k, v, r, table, p, out, lse);
      });
      std::printf("%-40s T=%lld  forward mma.sync %8.3f ms %7.1f TFLOP/s\n", layer.name, static_cast<long long>(T), mma,
                  4.0 * n * d / mma / 1e9);
      Tensor out_wg = Tensor::empty({T, H, d}, DType::BF16, *ctx.allocator), lse_wg = Tensor::empty({H, T}, DType::F32, *ctx.allocator);
      // Each form of the wgmma forward (the wide one on trial: --attention-forward-form wide), checked against
      // mma.sync's outputs first (the checked call names a failing kernel), then timed.
      for (const AttentionForwardForm form : {AttentionForwardForm::kNarrow, AttentionForwardForm::kWide}) {
        cuda::attn_wg::Options options;
        options.forward_form = form;
        options.sync_check = true;
        cuda::attn_wg::attention_forward_wgmma(ctx, q, k, v, r, table, p, out_wg, lse_wg, options);
        const double d_out = max_abs_diff(ctx, out_wg, out), d_lse = max_abs_diff(ctx, lse_wg, lse);
        options.sync_check = false;
        const double wg = median_ms(stream, [&] {
          cuda::attn_wg::attention_forward_wgmma(ctx, q, k, v, r, table, p, out_wg, lse_wg, options);
        });
        std::printf("%-40s T=%lld  forward wgmma%s %8.3f ms %7.1f TFLOP/s   max |diff| vs mma.sync: out %.3g, lse %.3g\n",
                    layer.name, static_cast<long long>(T), form == AttentionForwardForm::kWide ? " wide" : "", wg,
                    4.0 * n * d / wg / 1e9, d_out, d_lse);
        std::fflush(stdout);
      }
    }
    {
      // The mma.sync backward's outputs are the reference (ops::attention_backward may route to either).
      const double mma = median_ms(stream, [&] {
        cuda::attn_wg::attention_backward_mma_sync(ctx, q, k, v, r, table, p, out, lse, dout, dq, dk, dv, dr, dtable);
      });
      std::printf("%-40s T=%lld  backward mma.sync %8.3f ms %7.1f TFLOP/s\n", layer.name, static_cast<long long>(T), mma,
                  10.0 * n * d / mma / 1e9);
      Tensor dq_wg = Tensor::empty({T, H, d}, DType::BF16, *ctx.allocator), dk_wg = Tensor::empty({T, G, d}, DType::BF16, *ctx.allocator),
             dv_wg = Tensor::empty({T, G, d}, DType::BF16, *ctx.allocator), dr_wg = Tensor::empty({T, H, R}, DType::BF16, *ctx.allocator);
      cuda::attn_wg::Options options;
      options.sync_check = true;
      cuda::attn_wg::attention_backward_wgmma(ctx, q, k, v, r, table, p, out, lse, dout, dq_wg, dk_wg, dv_wg, dr_wg, dtable,
                                              options);
      const double e_q = max_abs_diff(ctx, dq_wg, dq), e_k = max_abs_diff(ctx, dk_wg, dk), e_v = max_abs_diff(ctx, dv_wg, dv),
                   e_r = max_abs_diff(ctx, dr_wg, dr);
      options.sync_check = false;
      const double wg = median_ms(stream, [&] {
        cuda::attn_wg::attention_backward_wgmma(ctx, q, k, v, r, table, p, out, lse, dout, dq_wg, dk_wg, dv_wg, dr_wg,
                                                dtable, options);
      });
      std::printf("%-40s T=%lld  backward wgmma %8.3f ms %7.1f TFLOP/s   max |diff| vs mma.sync: dq %.3g, dk %.3g, dv %.3g, "
                  "dr %.3g\n",
                  layer.name, static_cast<long long>(T), wg, 10.0 * n * d / wg / 1e9, e_q, e_k, e_v, e_r);
      std::fflush(stdout);
      // The producer form on trial (--attention-backward-form producer): the same bits as the row above (checked).
      Tensor dq_p = Tensor::empty({T, H, d}, DType::BF16, *ctx.allocator), dk_p = Tensor::empty({T, G, d}, DType::BF16, *ctx.allocator),
             dv_p = Tensor::empty({T, G, d}, DType::BF16, *ctx.allocator), dr_p = Tensor::empty({T, H, R}, DType::BF16, *ctx.allocator);
      options.backward_form = AttentionBackwardForm::kProducer;
      options.sync_check = true;
      cuda::attn_wg::attention_backward_wgmma(ctx, q, k, v, r, table, p, out, lse, dout, dq_p, dk_p, dv_p, dr_p, dtable,
                                              options);
      const double p_q = max_abs_diff(ctx, dq_p, dq_wg), p_k = max_abs_diff(ctx, dk_p, dk_wg),
                   p_v = max_abs_diff(ctx, dv_p, dv_wg), p_r = max_abs_diff(ctx, dr_p, dr_wg);
      options.sync_check = false;
      const double prod = median_ms(stream, [&] {
        cuda::attn_wg::attention_backward_wgmma(ctx, q, k, v, r, table, p, out, lse, dout, dq_p, dk_p, dv_p, dr_p, dtable,
                                                options);
      });
      std::printf("%-40s T=%lld  backward wgmma producer %8.3f ms %7.1f TFLOP/s   max |diff| vs the row above: dq %.3g, "
                  "dk %.3g, dv %.3g, dr %.3g\n",
                  layer.name, static_cast<long long>(T), prod, 10.0 * n * d / prod / 1e9, p_q, p_k, p_v, p_r);
      std::fflush(stdout);
    }
  }
  return 0;
}

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {  // no GPU, a kernel that failed: one line, not an abort
    std::fprintf(stderr, "attention_bench: %s\n", e.what());
    return 1;
  }
}
