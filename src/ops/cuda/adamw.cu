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
// A BF16 moment (Megatron's --exp-avg-dtype / --exp-avg-sq-dtype bf16) is widened to fp32 on load;
// the update uses the fp32 value and only the store rounds (nearest even), as the CPU reference does.
// The scalar factors are formed on the host exactly as the CPU reference forms them, and every
// operation is an explicitly rounded fp32 intrinsic (no FMA contraction; IEEE sqrt and division),
// so the result is the CPU reference's, bit for bit, unless that was compiled with contraction.
// Shapes: value, grad, exp_avg (m), exp_avg_sq (v), compute: one shape.
// Dtypes: value, grad F32; m, v F32 or BF16 (each); compute F32 or BF16.
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
__device__ __forceinline__ float load_state(float x) { return x; }
__device__ __forceinline__ float load_state(bf16 x) { return __bfloat162float(__ushort_as_bfloat16(x)); }

__device__ __forceinline__ void update(float& w, float grad, float& m, float& v, const Factors& f) {
  const float g = __fmul_rn(grad, f.clip);
  m = __fadd_rn(__fmul_rn(f.beta1, m), __fmul_rn(f.one_minus_beta1, g));
  v = __fadd_rn(__fmul_rn(f.beta2, v), __fmul_rn(__fmul_rn(f.one_minus_beta2, g), g));
  w = __fmul_rn(w, f.decay);
  const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), f.bc2_sqrt), f.eps);
  w = __fsub_rn(w, __fdiv_rn(__fmul_rn(f.step_size, m), denom));
}

// M and S are the moments' element types (float or bf16 bits); C is the compute copy's;
// compute == nullptr skips it.
template <typename M, typename S, typename C, int V>
__global__ void adamw_kernel(float* value, const float* grad, M* m, S* v, C* compute, int64_t n, Factors f) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t nv = n / V;
  for (int64_t i = tid; i < nv; i += stride) {
    Pack<float, V> pw = reinterpret_cast<const Pack<float, V>*>(value)[i];
    const Pack<float, V> pg = reinterpret_cast<const Pack<float, V>*>(grad)[i];
    Pack<M, V> pm = reinterpret_cast<const Pack<M, V>*>(m)[i];
    Pack<S, V> pv = reinterpret_cast<const Pack<S, V>*>(v)[i];
#pragma unroll
    for (int j = 0; j < V; ++j) {
      float mj = load_state(pm.v[j]), vj = load_state(pv.v[j]);
      update(pw.v[j], pg.v[j], mj, vj, f);
      store_compute(&pm.v[j], mj);
      store_compute(&pv.v[j], vj);
    }
    reinterpret_cast<Pack<float, V>*>(value)[i] = pw;
    reinterpret_cast<Pack<M, V>*>(m)[i] = pm;
    reinterpret_cast<Pack<S, V>*>(v)[i] = pv;
    if (compute) {
      Pack<C, V> pc;
#pragma unroll
      for (int j = 0; j < V; ++j) store_compute(&pc.v[j], pw.v[j]);
      reinterpret_cast<Pack<C, V>*>(compute)[i] = pc;
    }
  }
  for (int64_t i = nv * V + tid; i < n; i += stride) {
    float w = value[i], mi = load_state(m[i]), vi = load_state(v[i]);
    update(w, grad[i], mi, vi, f);
    value[i] = w;
    store_compute(m + i, mi);
    store_compute(v + i, vi);
    if (compute) store_compute(compute + i, w);
  }
}

bool aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

template <typename M, typename S, typename C>
void launch(const DeviceContext& ctx, const Tensor& value, const Tensor& grad, const Tensor& m, const Tensor& v,
            C* compute, const Factors& f) {
  const int64_t n = value.numel();
  if (n == 0) return;
  constexpr int V = 4;
  const bool vec = aligned(value.data(), 16) && aligned(grad.data(), 16) && aligned(m.data(), sizeof(M) * V) &&
                   aligned(v.data(), sizeof(S) * V) && (compute == nullptr || aligned(compute, sizeof(C) * V));
  const int64_t items = vec ? n / V + 1 : n;
  const int blocks = static_cast<int>(std::clamp<int64_t>((items + kThreads - 1) / kThreads, 1, kMaxBlocks));
  float* w = value.data_as<float>();
  const float* g = grad.data_as<float>();
  if (vec)
    adamw_kernel<M, S, C, V><<<blocks, kThreads, 0, stream_of(ctx)>>>(w, g, m.data_as<M>(), v.data_as<S>(), compute, n, f);
  else
    adamw_kernel<M, S, C, 1><<<blocks, kThreads, 0, stream_of(ctx)>>>(w, g, m.data_as<M>(), v.data_as<S>(), compute, n, f);
  QUILL_CUDA_CHECK_LAUNCH("adamw_update");
}

// The moments' dtypes picked at run time, the compute copy's type given.
template <typename C>
void launch_for_moments(const DeviceContext& ctx, const Tensor& value, const Tensor& grad, const Tensor& m,
                        const Tensor& v, C* compute, const Factors& f) {
  const bool m16 = m.dtype() == DType::BF16, v16 = v.dtype() == DType::BF16;
  if (!m16 && !v16) launch<float, float, C>(ctx, value, grad, m, v, compute, f);
  else if (m16 && !v16) launch<bf16, float, C>(ctx, value, grad, m, v, compute, f);
  else if (!m16 && v16) launch<float, bf16, C>(ctx, value, grad, m, v, compute, f);
  else launch<bf16, bf16, C>(ctx, value, grad, m, v, compute, f);
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
    if (t == &exp_avg || t == &exp_avg_sq)
      QUILL_CHECK(t->dtype() == DType::F32 || t->dtype() == DType::BF16, "{}: {} has dtype {}, expected F32 or BF16", op,
                  name, dtype_name(t->dtype()));
    else
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
    launch_for_moments<bf16>(ctx, value, grad, exp_avg, exp_avg_sq, compute.data_as<bf16>(), f);
  else
    launch_for_moments<float>(ctx, value, grad, exp_avg, exp_avg_sq, write_compute ? compute.data_as<float>() : nullptr, f);
}

}  // namespace quill::cuda
