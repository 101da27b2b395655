// CUDA embedding lookup and its backward (ops/embedding.h; dtypes: docs/decisions/cuda-precision.md).
//   forward:  out[t, :] = table[ids[t], :]                 table_VD BF16 [V, D], out_TD BF16 [T, D]
//   backward: dtable[ids[t], :] += dout[t, :]              dout_TD BF16 [T, D], dtable_VD F32 [V, D]
// Legend: V vocabulary rows, D model width, T tokens; ids_T I32 [T] in device memory.
// Preconditions: every id in [0, V). The ids live on the device, so a check kernel records the first
// bad position in a device word, the host copies it back (one synchronisation) and throws naming it,
// before anything is written. Backward adds with fp32 atomics (repeated ids add in any order).
#include <algorithm>
#include <climits>
#include <string>

#include "ops/cuda/cuda_resources.h"
#include "ops/cuda/kernels.h"
#include "ops/dispatch.h"

namespace quill::cuda {
namespace {

using ops_detail::require_dtype;
using ops_detail::require_shape;

constexpr int kThreads = 256;

void require_device(const char* op, const char* name, const Tensor& t) {
  QUILL_CHECK(t.defined() && t.device() == Device::CUDA, "{}: {} must be in GPU memory, got {}", op, name,
              t.defined() ? t.describe() : std::string("(undefined)"));
}

// Smallest t with ids[t] outside [0, V) (atomicMin into *first_bad, which starts at UINT_MAX).
__global__ void check_ids_kernel(const int32_t* ids, int64_t n_tok, int64_t V, unsigned* first_bad) {
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < n_tok; t += int64_t(gridDim.x) * blockDim.x) {
    const int32_t id = ids[t];
    if (id < 0 || id >= V) atomicMin(first_bad, static_cast<unsigned>(t));
  }
}

// Throws naming the first id outside [0, V); one small copy back and a stream synchronisation.
void check_ids(const char* op, const DeviceContext& ctx, const Tensor& ids_T, int64_t V) {
  const int64_t n_tok = ids_T.dim(0);
  if (n_tok == 0) return;
  cudaStream_t stream = stream_of(ctx);
  Tensor flag = Tensor::empty({1}, DType::I32, *ctx.allocator);
  unsigned* first_bad = static_cast<unsigned*>(flag.data());
  QUILL_CUDA_CHECK(cudaMemsetAsync(first_bad, 0xff, sizeof(unsigned), stream));
  const int blocks = static_cast<int>(std::min<int64_t>((n_tok + kThreads - 1) / kThreads, 1024));
  check_ids_kernel<<<blocks, kThreads, 0, stream>>>(ids_T.data_as<int32_t>(), n_tok, V, first_bad);
  QUILL_CUDA_CHECK_LAUNCH("check_ids_kernel");
  unsigned bad = UINT_MAX;
  QUILL_CUDA_CHECK(cudaMemcpyAsync(&bad, first_bad, sizeof(unsigned), cudaMemcpyDeviceToHost, stream));
  QUILL_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (bad == UINT_MAX) return;
  int32_t id = 0;
  QUILL_CUDA_CHECK(cudaMemcpy(&id, ids_T.data_as<int32_t>() + bad, sizeof(int32_t), cudaMemcpyDeviceToHost));
  QUILL_FAIL("{}: token id {} at position {} is outside the vocabulary [0, {})", op, id, bad, V);
}

// One block per token row; 16-byte copies when D and both rows allow them.
__global__ void embedding_forward_kernel(const __nv_bfloat16* table, const int32_t* ids, int64_t D, bool vec,
                                         __nv_bfloat16* out) {
  const int64_t t = blockIdx.x;
  const __nv_bfloat16* src = table + static_cast<int64_t>(ids[t]) * D;
  __nv_bfloat16* dst = out + t * D;
  if (vec) {
    const uint4* s = reinterpret_cast<const uint4*>(src);
    uint4* d = reinterpret_cast<uint4*>(dst);
    for (int64_t i = threadIdx.x; i < D / 8; i += blockDim.x) d[i] = s[i];
  } else {
    for (int64_t i = threadIdx.x; i < D; i += blockDim.x) dst[i] = src[i];
  }
}

__global__ void embedding_backward_kernel(const int32_t* ids, const __nv_bfloat16* dout, int64_t D, float* dtable) {
  const int64_t t = blockIdx.x;
  float* row = dtable + static_cast<int64_t>(ids[t]) * D;
  const __nv_bfloat16* g = dout + t * D;
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) atomicAdd(row + i, __bfloat162float(g[i]));
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

}  // namespace

void embedding_forward(const DeviceContext& ctx, const Tensor& table_VD, const Tensor& ids_T, const Tensor& out_TD) {
  const char* op = "embedding_forward";
  QUILL_CHECK(table_VD.defined() && table_VD.ndim() == 2, "{}: table must be 2-D [V, D], got {}", op,
              table_VD.defined() ? table_VD.describe() : std::string("(undefined)"));
  const int64_t V = table_VD.dim(0), D = table_VD.dim(1);
  QUILL_CHECK(ids_T.defined() && ids_T.ndim() == 1, "{}: ids must be 1-D [T], got {}", op,
              ids_T.defined() ? ids_T.describe() : std::string("(undefined)"));
  const int64_t n_tok = ids_T.dim(0);
  require_shape(op, "out", out_TD, {n_tok, D});
  require_dtype(op, "table", table_VD, DType::BF16);
  require_dtype(op, "ids", ids_T, DType::I32);
  require_dtype(op, "out", out_TD, DType::BF16);
  require_device(op, "table", table_VD);
  require_device(op, "ids", ids_T);
  require_device(op, "out", out_TD);
  QUILL_CHECK(n_tok <= INT_MAX, "{}: {} tokens exceed the kernel's grid", op, n_tok);
  check_ids(op, ctx, ids_T, V);
  if (n_tok == 0 || D == 0) return;
  const bool vec = D % 8 == 0 && aligned16(table_VD.data()) && aligned16(out_TD.data());
  embedding_forward_kernel<<<static_cast<unsigned>(n_tok), kThreads, 0, stream_of(ctx)>>>(
      table_VD.data_as<__nv_bfloat16>(), ids_T.data_as<int32_t>(), D, vec, out_TD.data_as<__nv_bfloat16>());
  QUILL_CUDA_CHECK_LAUNCH("embedding_forward_kernel");
}

void embedding_backward(const DeviceContext& ctx, const Tensor& ids_T, const Tensor& dout_TD, const Tensor& dtable_VD) {
  const char* op = "embedding_backward";
  QUILL_CHECK(dtable_VD.defined() && dtable_VD.ndim() == 2, "{}: dtable must be 2-D [V, D], got {}", op,
              dtable_VD.defined() ? dtable_VD.describe() : std::string("(undefined)"));
  const int64_t V = dtable_VD.dim(0), D = dtable_VD.dim(1);
  QUILL_CHECK(ids_T.defined() && ids_T.ndim() == 1, "{}: ids must be 1-D [T], got {}", op,
              ids_T.defined() ? ids_T.describe() : std::string("(undefined)"));
  const int64_t n_tok = ids_T.dim(0);
  require_shape(op, "dout", dout_TD, {n_tok, D});
  require_dtype(op, "ids", ids_T, DType::I32);
  require_dtype(op, "dout", dout_TD, DType::BF16);
  require_dtype(op, "dtable", dtable_VD, DType::F32);
  require_device(op, "ids", ids_T);
  require_device(op, "dout", dout_TD);
  require_device(op, "dtable", dtable_VD);
  QUILL_CHECK(n_tok <= INT_MAX, "{}: {} tokens exceed the kernel's grid", op, n_tok);
  check_ids(op, ctx, ids_T, V);
  if (n_tok == 0 || D == 0) return;
  embedding_backward_kernel<<<static_cast<unsigned>(n_tok), kThreads, 0, stream_of(ctx)>>>(
      ids_T.data_as<int32_t>(), dout_TD.data_as<__nv_bfloat16>(), D, dtable_VD.data_as<float>());
  QUILL_CUDA_CHECK_LAUNCH("embedding_backward_kernel");
}

}  // namespace quill::cuda
