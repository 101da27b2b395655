// Host side of the Hopper attention forward: argument checks, the per-call bias band and tau rows,
// the tensor maps and the launch (kernel: attention_wg_forward.cu).
#include "ops/cuda/attention_tc.h"
#include "ops/cuda/attention_wg.h"
#include "ops/cuda/attention_wg_internal.h"

namespace quill::cuda::attn_wg {

bool takes(const attn::Problem& p) { return p.d == kD && p.window == 0 && device_supported(); }

bool device_supported() {
  int dev = 0, major = 0, minor = 0;
  QUILL_CUDA_CHECK(cudaGetDevice(&dev));
  QUILL_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  QUILL_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  return major == 9 && minor == 0;
}

void attention_forward_wgmma(const DeviceContext& ctx, const Tensor& q_THd, const Tensor& k_TGd, const Tensor& v_TGd,
                             const Tensor& r_THR, const Tensor& table_RE, const ops::AttentionParams& params,
                             const Tensor& out_THd, const Tensor& lse_HT, const Options& options) {
  const char* op = "attention_forward_wgmma";
  const attn::Problem p = attn::make_problem(op, q_THd, k_TGd, v_TGd, r_THR, table_RE, params);
  attn::require_device(op, "out_THd", out_THd, {p.T, p.H, p.d}, DType::BF16);
  attn::require_device(op, "lse_HT", lse_HT, {p.H, p.T}, DType::F32);
  QUILL_CHECK(p.d == kD, "{}: head dim {} is not supported (this path is for head dim {} only)", op, p.d, kD);
  QUILL_CHECK(device_supported(), "{}: needs a compute capability 9.0 GPU (sm_90a: wgmma, TMA)", op);
  if (p.T == 0 || p.H == 0) return;

  WgProblem wp{p.T, p.H, p.G, p.E, p.window, p.scale, nullptr, 0};
  Tensor band, tau;
  LaunchArgs args{};
  args.q_map = rows_map("q_THd", q_THd.data(), p.T, p.H);
  args.k_map = rows_map("k_TGd", k_TGd.data(), p.T, p.G);
  args.v_map = rows_map("v_TGd", v_TGd.data(), p.T, p.G);
  args.b_map = args.q_map;  // never read without a band (has_bias = 0)
  if (p.R > 0 && p.E > 0) {
    band = Tensor::empty({band_floats(p.T, p.H, p.E)}, DType::F32, *ctx.allocator);
    write_bias_band(ctx, p, r_THR, table_RE, band);
    args.b_map = band_map(band.data(), p.T, p.H, p.E);
    wp.has_bias = 1;
  }
  if (p.log_scaling) {
    tau = Tensor::empty({p.T}, DType::F32, *ctx.allocator);
    attn_tc::tau_rows(ctx, p, tau);
    wp.tau = tau.data_as<float>();
  }
  args.p = wp;
  args.out = out_THd.data_as<__nv_bfloat16>();
  args.lse = lse_HT.data_as<float>();
  const cudaStream_t stream = stream_of(ctx);
  launch_forward_kernel(args, stream, options.forward_form);
  if (options.sync_check) {
    const cudaError_t err = cudaStreamSynchronize(stream);
    QUILL_CHECK(err == cudaSuccess, "{}: the kernel failed: {}", op, cudaGetErrorString(err));
  }
  // band and tau are freed here in stream order (the allocator's frees are stream-ordered).
}

}  // namespace quill::cuda::attn_wg
