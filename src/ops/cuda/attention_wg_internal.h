// What the pieces of the Hopper attention forward share (attention_wg_*.cu only): the problem as the
// kernel reads it, the launch arguments, the banded-bias writer and the TMA tensor maps.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "ops/cuda/attention_common.cuh"
#include "ops/cuda/attention_wg.h"
#include "ops/cuda/attention_wg_layout.h"

namespace quill::cuda::attn_wg {

// The problem as the kernel reads it. tau: [T] fp32 or null (log scaling off); has_bias: the band
// exists (R > 0 and E > 0), so b_map is valid.
struct WgProblem {
  int T, H, G, E, window;
  float scale;
  const float* tau;
  int has_bias;
};

struct LaunchArgs {
  CUtensorMap q_map, k_map, v_map, b_map;
  WgProblem p;
  __nv_bfloat16* out;
  float* lse;
};

// form: the key tiles (ops/kernel_trials.h: narrow 64 keys, the default; wide 128, an experiment).
void launch_forward_kernel(const LaunchArgs& args, cudaStream_t stream, AttentionForwardForm form);

// True when ops::attention_forward and attention_backward run this path for p: head dim 128, a global
// (unwindowed) layer, an sm_90 device (the measured choice, attention_wg.h).
bool takes(const attn::Problem& p);

// band (band_floats(T, H, E) fp32, attention_wg_layout.h) = the bias of every (t, s) pair with a band
// slot, zero where the distance is outside [0, E) or t >= T. Every slot is written (no memset needed).
void write_bias_band(const DeviceContext& ctx, const attn::Problem& p, const Tensor& r_THR, const Tensor& table_RE,
                     const Tensor& band);

// TMA tensor maps (attention_wg_tma.cu). rows_map: a [T, X, 128] bf16 tensor (X = H or G heads) as
// boxes of 64 rows x 64 columns of one head, 128-byte swizzle. band_map: the banded bias as boxes of
// 64 rows x 32 keys of one key block and head, 128-byte swizzle. Both zero-fill out-of-bounds boxes.
CUtensorMap rows_map(const char* what, const void* base, int64_t T, int64_t X);
CUtensorMap band_map(const void* band, int64_t T, int64_t H, int64_t E);


// The wgmma backward (attention_wg_backward.cu) after attention_backward's checks, with D = dout . out
// ([H, T] fp32); the same outputs as attn_tc::backward. options.sync_check: synchronise and name the kernel in the
// error.
void backward(const DeviceContext& ctx, const attn::Problem& p, const Tensor& q_THd, const Tensor& k_TGd,
              const Tensor& v_TGd, const Tensor& r_THR, const Tensor& table_RE, const Tensor& lse_HT, const Tensor& D_HT,
              const Tensor& dout_THd, const Tensor& dq_THd, const Tensor& dk_TGd, const Tensor& dv_TGd,
              const Tensor& dr_THR, const Tensor& dtable_RE, const Options& options);

}  // namespace quill::cuda::attn_wg
