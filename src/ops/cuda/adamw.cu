// The fused AdamW update of one parameter tensor on the GPU (ops/adamw.h).
//
// Math (torch.optim.AdamW; the same order of operations as ops/cpu/adamw.cc), per element:
//   g = grad * clip
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g * g
//   w = w * (1 - lr * weight_decay)
//   w = w - (lr / bias_correction1) * m / (sqrt(v) / sqrt(bias_correction2) + eps)
//   compute = w in compute's dtype (BF16: round to nearest even), when compute is defined and is
//   not w's own memory.
// The scalar factors are formed on the host exactly as the CPU reference forms them, and every
// operation is an explicitly rounded fp32 intrinsic (no FMA contraction; IEEE sqrt and division),
// so the result is the CPU reference's, bit for bit, unless that was compiled with contraction.
// Shapes: value, grad, exp_avg (m), exp_avg_sq (v), compute: one shape.
// Dtypes: value, grad, m, v F32; compute F32 or BF16.
// Preconditions: tensors on the context's device, not overlapping (compute may be value itself).
// Loads are 16-byte vectors when every pointer allows it.
#include "ops/cuda/cuda_resources.h"
#include "ops/cuda/kernels.h"
#include "ops/dispatch.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

namespace quill::cuda {
namespace {

using ops_detail::require_dtype;
using ops_detail::require_shape;

using bf16 = uint16_t;  // bf16 bits, as quill stores them

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;

struct Factors {
  float clip, beta1, one_minus_beta1, beta2, one_minus_beta2, decay, step_size, bc2_sqrt, eps;
};

template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

__device__ __forceinline__ void store_compute(float* c, float w) { *c = w; }
__device__ __forceinline__ void store_compute(bf16* c, float w) { *c = __bfloat16_as_ushort(__float2bfloat16_rn(w)); }

__device__ __forceinline__ void update(float& w, float grad, float& m, float& v, const Factors& f) {
  const float g = __fmul_rn(grad, f.clip);
  m = __fadd_rn(__fmul_rn(f.beta1, m), __fmul_rn(f.one_minus_beta1, g));
  v = __fadd_rn(__fmul_rn(f.beta2, v), __fmul_rn(__fmul_rn(f.one_minus_beta2, g), g));
  w = __fmul_rn(w, f.decay);
  const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), f.bc2_sqrt), f.eps);
  w = __fsub_rn(w, __fdiv_rn(__fmul_rn(f.step_size, m), denom));
}

// C is the compute copy's element type; compute == nullptr skips it.
template <typename C, int V>
__global__ void adamw_kernel(float* value, const float* grad, float* m, float* v, C* compute, int64_t n, Factors f) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t nv = n / V;
  for (int64_t i = tid; i < nv; i += stride) {
    Pack<float, V> pw = reinterpret_cast<const Pack<float, V>*>(value)[i];
    const Pack<float, V> pg = reinterpret_cast<const Pack<float, V>*>(grad)[i];
    Pack<float, V> pm = reinterpret_cast<const Pack<float, V>*>(m)[i];
    Pack<float, V> pv = reinterpret_cast<const Pack<float, V>*>(v)[i];
#pragma unroll
    for (int j = 0; j < V; ++j) update(pw.v[j], pg.v[j], pm.v[j], pv.v[j], f);
    reinterpret_cast<Pack<float, V>*>(value)[i] = pw;
    reinterpret_cast<Pack<float, V>*>(m)[i] = pm;
    reinterpret_cast<Pack<float, V>*>(v)[i] = pv;
    if (compute) {
      Pack<C, V> pc;
#pragma unroll
      for (int j = 0; j < V; ++j) store_compute(&pc.v[j], pw.v[j]);
      reinterpret_cast<Pack<C, V>*>(compute)[i] = pc;
    }
  }
  for (int64_t i = nv * V + tid; i < n; i += stride) {
    float w = value[i], mi = m[i], vi = v[i];
    update(w, grad[i], mi, vi, f);
    value[i] = w;
    m[i] = mi;
    v[i] = vi;
    if (compute) store_compute(compute + i, w);
  }
}

bool aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

template <typename C>
void launch(const DeviceContext& ctx, const Tensor& value, const Tensor& grad, const Tensor& m, const Tensor& v,
            C* compute, const Factors& f) {
  const int64_t n = value.numel();
  if (n == 0) return;
  constexpr int V = 4;
  const bool vec = aligned(value.data(), 16) && aligned(grad.data(), 16) && aligned(m.data(), 16) &&
                   aligned(v.data(), 16) && (compute == nullptr || aligned(compute, sizeof(C) * V));
  const int64_t items = vec ? n / V + 1 : n;
  const int blocks = static_cast<int>(std::clamp<int64_t>((items + kThreads - 1) / kThreads, 1, kMaxBlocks));
  float* w = value.data_as<float>();
  const float* g = grad.data_as<float>();
  if (vec)
    adamw_kernel<C, V><<<blocks, kThreads, 0, stream_of(ctx)>>>(w, g, m.data_as<float>(), v.data_as<float>(),
                                                                 compute, n, f);
  else
    adamw_kernel<C, 1><<<blocks, kThreads, 0, stream_of(ctx)>>>(w, g, m.data_as<float>(), v.data_as<float>(),
                                                                 compute, n, f);
  QUILL_CUDA_CHECK_LAUNCH("adamw_update");
}

}  // namespace

void adamw_update(const DeviceContext& ctx, const Tensor& value, const Tensor& grad, const Tensor& exp_avg,
                  const Tensor& exp_avg_sq, const Tensor& compute, const AdamWStep& s) {
  const char* op = "adamw_update";
  QUILL_CHECK(value.defined(), "{}: value is undefined", op);
  const std::pair<const char*, const Tensor*> state[] = {
      {"value", &value}, {"grad", &grad}, {"exp_avg", &exp_avg}, {"exp_avg_sq", &exp_avg_sq}};
  for (const auto& [name, t] : state) {
    require_shape(op, name, *t, value.shape());
    require_dtype(op, name, *t, DType::F32);
    QUILL_CHECK(t->device() == Device::CUDA, "{}: {} must be a CUDA tensor, got {}", op, name, t->describe());
  }
  const bool write_compute = compute.defined() && compute.data() != value.data();
  if (write_compute) {
    require_shape(op, "compute", compute, value.shape());
    QUILL_CHECK(compute.dtype() == DType::F32 || compute.dtype() == DType::BF16,
                "{}: compute has dtype {}, expected BF16 or F32", op, dtype_name(compute.dtype()));
    QUILL_CHECK(compute.device() == Device::CUDA, "{}: compute must be a CUDA tensor, got {}", op,
                compute.describe());
  }
  // Formed as ops/cpu/adamw.cc forms them.
  Factors f;
  f.clip = s.clip;
  f.beta1 = s.beta1;
  f.one_minus_beta1 = 1.0f - s.beta1;
  f.beta2 = s.beta2;
  f.one_minus_beta2 = 1.0f - s.beta2;
  f.decay = 1.0f - s.lr * s.weight_decay;
  f.step_size = static_cast<float>(s.lr / s.bias_correction1);
  f.bc2_sqrt = static_cast<float>(std::sqrt(s.bias_correction2));
  f.eps = s.eps;
  if (write_compute && compute.dtype() == DType::BF16)
    launch<bf16>(ctx, value, grad, exp_avg, exp_avg_sq, compute.data_as<bf16>(), f);
  else
    launch<float>(ctx, value, grad, exp_avg, exp_avg_sq, write_compute ? compute.data_as<float>() : nullptr, f);
}

}  // namespace quill::cuda
