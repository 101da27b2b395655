// CUDA SwiGLU on the split layout h = [gate | up] (ops/swiglu.h; dtypes: docs/decisions/cuda-precision.md).
//   forward:  a[n, f] = silu(g) * u,   g = h[n, f], u = h[n, F + f],  silu(g) = g * sigmoid(g)
//   backward: dh[n, f]     = da[n, f] * u * sigmoid(g) * (1 + g * (1 - sigmoid(g)))   (overwritten)
//             dh[n, F + f] = da[n, f] * silu(g)
// Legend: N rows, F intermediate width. h_N2F, dh_N2F BF16 [N, 2F]; a_NF, da_NF BF16 [N, F]; fp32 math,
// one rounding to bf16 per output.
// Layout: the [N, F] pairs are cut into units of kW consecutive f of one row (bf16_units.cuh): kW = 8
// (16-byte loads and stores) when F % 8 == 0 and every tensor is 16-byte aligned, else kW = 1. A grid
// of one resident wave walks the units in a grid-stride loop, kUnitsPerTrip units per trip with all
// their loads issued before any store (bytes in flight); the unit's row and column are stepped
// without a division per unit (RowWalk).
// dh may alias h: each unit is read (g, u, da) by one thread before that thread writes its gradients,
// and no other thread touches those elements.
#include <algorithm>
#include <string>

#include "ops/cuda/bf16_units.cuh"
#include "ops/cuda/cuda_resources.h"
#include "ops/cuda/kernels.h"
#include "ops/dispatch.h"

namespace quill::cuda {
namespace {

using ops_detail::require_dtype;
using ops_detail::require_shape;
using units::Bf16Unit;
using units::load_unit;
using units::store_unit;

constexpr int kThreads = 256;
constexpr int kUnitsPerTrip = 2;

void require_device(const char* op, const char* name, const Tensor& t) {
  QUILL_CHECK(t.defined() && t.device() == Device::CUDA, "{}: {} must be in GPU memory, got {}", op, name,
              t.defined() ? t.describe() : std::string("(undefined)"));
}

__device__ __forceinline__ float sigmoid_f32(float g) { return 1.0f / (1.0f + expf(-g)); }

// A position (n, c) on the [N, C] grid of units, u = n * C + c, moved by the grid-stride S = sn * C + sc
// (0 <= sc < C, from the host): c + sc < 2C, so one conditional subtraction renormalises.
struct RowWalk {
  int64_t n, c;
  __device__ __forceinline__ void step(int64_t sn, int64_t sc, int64_t C) {
    n += sn;
    c += sc;
    if (c >= C) {
      c -= C;
      ++n;
    }
  }
};

struct Stride {
  int64_t sn, sc;  // the grid's thread count S = sn * C + sc
};

__device__ __forceinline__ RowWalk first_unit(int64_t C) {
  const int64_t u = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;  // one division per thread
  return {u / C, u % C};
}

template <int kW>
__global__ void __launch_bounds__(kThreads) swiglu_forward_kernel(const __nv_bfloat16* h, int64_t N, int64_t F,
                                                                  Stride S, __nv_bfloat16* a) {
  const int64_t C = F / kW;
  RowWalk at = first_unit(C);
  while (at.n < N) {
    RowWalk pos[kUnitsPerTrip];
    bool live[kUnitsPerTrip];
    Bf16Unit<kW> g[kUnitsPerTrip], u[kUnitsPerTrip];
#pragma unroll
    for (int j = 0; j < kUnitsPerTrip; ++j) {
      pos[j] = at;
      live[j] = at.n < N;
      if (live[j]) {
        const __nv_bfloat16* hr = h + at.n * 2 * F + at.c * kW;
        g[j] = load_unit<kW>(hr);
        u[j] = load_unit<kW>(hr + F);
      }
      at.step(S.sn, S.sc, C);
    }
#pragma unroll
    for (int j = 0; j < kUnitsPerTrip; ++j) {
      if (!live[j]) continue;
      float out[kW];
#pragma unroll
      for (int e = 0; e < kW; ++e) {
        const float gv = g[j][e];
        out[e] = gv * sigmoid_f32(gv) * u[j][e];
      }
      store_unit<kW>(a + pos[j].n * F + pos[j].c * kW, out);
    }
  }
}

template <int kW>
__global__ void __launch_bounds__(kThreads) swiglu_backward_kernel(const __nv_bfloat16* h, const __nv_bfloat16* da,
                                                                   int64_t N, int64_t F, Stride S, __nv_bfloat16* dh) {
  const int64_t C = F / kW;
  RowWalk at = first_unit(C);
  while (at.n < N) {
    RowWalk pos[kUnitsPerTrip];
    bool live[kUnitsPerTrip];
    Bf16Unit<kW> g[kUnitsPerTrip], u[kUnitsPerTrip], d[kUnitsPerTrip];
#pragma unroll
    for (int j = 0; j < kUnitsPerTrip; ++j) {
      pos[j] = at;
      live[j] = at.n < N;
      if (live[j]) {
        const __nv_bfloat16* hr = h + at.n * 2 * F + at.c * kW;
        g[j] = load_unit<kW>(hr);
        u[j] = load_unit<kW>(hr + F);
        d[j] = load_unit<kW>(da + at.n * F + at.c * kW);
      }
      at.step(S.sn, S.sc, C);
    }
    // Every load of this trip is above: with dh aliasing h, the stores below overwrite only what
    // this thread has already read.
#pragma unroll
    for (int j = 0; j < kUnitsPerTrip; ++j) {
      if (!live[j]) continue;
      float dg[kW], du[kW];
#pragma unroll
      for (int e = 0; e < kW; ++e) {
        const float gv = g[j][e], uv = u[j][e], dv = d[j][e];
        const float s = sigmoid_f32(gv);
        dg[e] = dv * uv * s * (1.0f + gv * (1.0f - s));
        du[e] = dv * gv * s;
      }
      __nv_bfloat16* dr = dh + pos[j].n * 2 * F + pos[j].c * kW;
      store_unit<kW>(dr, dg);
      store_unit<kW>(dr + F, du);
    }
  }
}

void check_h(const char* op, const char* name, const Tensor& t) {
  QUILL_CHECK(t.defined() && t.ndim() == 2 && t.dim(1) % 2 == 0, "{}: {} must be 2-D [N, 2F], got {}", op, name,
              t.defined() ? t.describe() : std::string("(undefined)"));
  require_dtype(op, name, t, DType::BF16);
  require_device(op, name, t);
}

// One resident wave of kThreads-thread blocks for kernel (no more than the N * C units need), and
// the grid's stride in units as (rows, units).
struct Grid {
  unsigned blocks;
  Stride stride;
};

template <typename Kernel>
Grid wave_for(const DeviceContext& ctx, Kernel kernel, int64_t N, int64_t C) {
  Grid g;
  g.blocks = units::resident_blocks(kernel, kThreads, 0, ctx.cuda->device, units::ceil_div(N * C, kThreads));
  const int64_t S = int64_t(g.blocks) * kThreads;
  g.stride = {S / C, S % C};
  return g;
}

}  // namespace

void swiglu_forward(const DeviceContext& ctx, const Tensor& h_N2F, const Tensor& a_NF) {
  const char* op = "swiglu_forward";
  check_h(op, "h", h_N2F);
  const int64_t N = h_N2F.dim(0), F = h_N2F.dim(1) / 2;
  require_shape(op, "a", a_NF, {N, F});
  require_dtype(op, "a", a_NF, DType::BF16);
  require_device(op, "a", a_NF);
  if (N * F == 0) return;
  const __nv_bfloat16* h = h_N2F.data_as<__nv_bfloat16>();
  __nv_bfloat16* a = a_NF.data_as<__nv_bfloat16>();
  if (F % units::kVec == 0 && units::aligned16(h) && units::aligned16(a)) {
    const Grid g = wave_for(ctx, swiglu_forward_kernel<units::kVec>, N, F / units::kVec);
    swiglu_forward_kernel<units::kVec><<<g.blocks, kThreads, 0, stream_of(ctx)>>>(h, N, F, g.stride, a);
  } else {
    const Grid g = wave_for(ctx, swiglu_forward_kernel<1>, N, F);
    swiglu_forward_kernel<1><<<g.blocks, kThreads, 0, stream_of(ctx)>>>(h, N, F, g.stride, a);
  }
  QUILL_CUDA_CHECK_LAUNCH("swiglu_forward_kernel");
}

void swiglu_backward(const DeviceContext& ctx, const Tensor& h_N2F, const Tensor& da_NF, const Tensor& dh_N2F) {
  const char* op = "swiglu_backward";
  check_h(op, "h", h_N2F);
  const int64_t N = h_N2F.dim(0), F = h_N2F.dim(1) / 2;
  require_shape(op, "da", da_NF, {N, F});
  require_shape(op, "dh", dh_N2F, {N, 2 * F});
  require_dtype(op, "da", da_NF, DType::BF16);
  require_dtype(op, "dh", dh_N2F, DType::BF16);
  require_device(op, "da", da_NF);
  require_device(op, "dh", dh_N2F);
  if (N * F == 0) return;
  const __nv_bfloat16* h = h_N2F.data_as<__nv_bfloat16>();
  const __nv_bfloat16* da = da_NF.data_as<__nv_bfloat16>();
  __nv_bfloat16* dh = dh_N2F.data_as<__nv_bfloat16>();
  if (F % units::kVec == 0 && units::aligned16(h) && units::aligned16(da) && units::aligned16(dh)) {
    const Grid g = wave_for(ctx, swiglu_backward_kernel<units::kVec>, N, F / units::kVec);
    swiglu_backward_kernel<units::kVec><<<g.blocks, kThreads, 0, stream_of(ctx)>>>(h, da, N, F, g.stride, dh);
  } else {
    const Grid g = wave_for(ctx, swiglu_backward_kernel<1>, N, F);
    swiglu_backward_kernel<1><<<g.blocks, kThreads, 0, stream_of(ctx)>>>(h, da, N, F, g.stride, dh);
  }
  QUILL_CUDA_CHECK_LAUNCH("swiglu_backward_kernel");
}

}  // namespace quill::cuda
