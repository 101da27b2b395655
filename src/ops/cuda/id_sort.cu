// sort_positions_by_id (id_sort.h): a key per position (its local row, or V outside the shard), then
// CUB's stable LSD radix sort of (key, position) pairs over the bits V needs. Its own translation unit:
// CUB's sort templates are most of its compile time.
#include "ops/cuda/id_sort.h"

#include <algorithm>

#include <cub/device/device_radix_sort.cuh>

#include "base/error.h"

#include "ops/cuda/cuda_resources.h"

namespace quill::cuda {
namespace {

__global__ void shard_keys_kernel(const int32_t* ids, int64_t n, int64_t begin, int64_t V, uint32_t* keys,
                                  int32_t* pos) {
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < n; t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = static_cast<int64_t>(ids[t]) - begin;
    keys[t] = static_cast<uint32_t>(r >= 0 && r < V ? r : V);
    pos[t] = static_cast<int32_t>(t);
  }
}

int bits_for(int64_t v) {  // the bits that hold 0 .. v
  int b = 1;
  while (b < 32 && (int64_t{1} << b) <= v) ++b;
  return b;
}

}  // namespace

void sort_positions_by_id(const DeviceContext& ctx, const Tensor& ids_T, int64_t begin, int64_t V, Tensor& keys_T,
                          Tensor& pos_T) {
  const int64_t n = ids_T.dim(0);
  QUILL_CHECK(n <= INT32_MAX && V < INT32_MAX, "sort_positions_by_id: {} positions or {} rows exceed 32 bits", n, V);
  const cudaStream_t stream = stream_of(ctx);
  Tensor keys_in = Tensor::empty({n}, DType::I32, *ctx.allocator), pos_in = Tensor::empty({n}, DType::I32, *ctx.allocator);
  keys_T = Tensor::empty({n}, DType::I32, *ctx.allocator);
  pos_T = Tensor::empty({n}, DType::I32, *ctx.allocator);
  if (n == 0) return;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 1024));
  shard_keys_kernel<<<blocks, 256, 0, stream>>>(ids_T.data_as<int32_t>(), n, begin, V,
                                                static_cast<uint32_t*>(keys_in.data()), pos_in.data_as<int32_t>());
  QUILL_CUDA_CHECK_LAUNCH("shard_keys_kernel");
  const int end_bit = bits_for(V);
  auto* k_in = static_cast<const uint32_t*>(keys_in.data());
  auto* k_out = static_cast<uint32_t*>(keys_T.data());
  size_t temp_bytes = 0;
  QUILL_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, k_in, k_out, pos_in.data_as<int32_t>(),
                                                   pos_T.data_as<int32_t>(), n, 0, end_bit, stream));
  Tensor temp = Tensor::empty({static_cast<int64_t>(temp_bytes)}, DType::U8, *ctx.allocator);
  QUILL_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.data(), temp_bytes, k_in, k_out, pos_in.data_as<int32_t>(),
                                                   pos_T.data_as<int32_t>(), n, 0, end_bit, stream));
}

}  // namespace quill::cuda
