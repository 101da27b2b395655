// gather_rows on the GPU (ops/gather_rows.h): dst[i] = src[index[i]], rows copied bit for bit.
// One block per destination row, each thread moving units of the widest size (16, 8, 4, 2 or 1
// bytes) that divides the row's bytes and both base addresses: the exchange's bf16 rows of 4,096
// are 8 KiB, 512 16-byte units. The rows are independent, so the block order does not matter and
// the result is the same bits on every run. Bandwidth-bound: a seed rank's regroup moves ~12,000
// rows of 8 KiB (~200 MB both ways) in one launch where it took 256 cudaMemcpyAsync calls.
// Indexes are not range-checked here (see the header); a grid of N blocks, N < 2^31.
// gather_rows_from_pair is the same kernel with the row's source chosen per block: a below R, else b.
// regroup_index builds the regrouping's two indexes from the received counts on the device (its kernel below).
#include <algorithm>
#include <cstdint>
#include <string>

#include "ops/cuda/cuda_resources.h"
#include "ops/cuda/gather_rows.h"
#include "ops/dispatch.h"

namespace quill::cuda {
namespace {

constexpr int kThreads = 256;

template <typename Unit>
__global__ void gather_rows_kernel(const Unit* src, const int32_t* index, int64_t units_per_row, Unit* dst) {
  const int64_t i = blockIdx.x;
  const Unit* from = src + static_cast<int64_t>(index[i]) * units_per_row;
  Unit* to = dst + i * units_per_row;
  for (int64_t u = threadIdx.x; u < units_per_row; u += blockDim.x) to[u] = from[u];
}

template <typename Unit>
__global__ void gather_rows_from_pair_kernel(const Unit* a, int64_t R, const Unit* b, const int32_t* index,
                                             int64_t units_per_row, Unit* dst) {
  const int64_t i = blockIdx.x, r = index[i];
  const Unit* from = r < R ? a + r * units_per_row : b + (r - R) * units_per_row;
  Unit* to = dst + i * units_per_row;
  for (int64_t u = threadIdx.x; u < units_per_row; u += blockDim.x) to[u] = from[u];
}

// regroup_index: block b of the grid-stride loop owns block (s, e) = (b / L, b % L) of the counts. Its two starts are
// sums over the counts before it in each order, summed by the block's threads (S L is the exchange's 8 x 32 at a seed
// rank: a few hundred reads from L2 per block); then its rows' two entries. Integer sums: the same on every run.
__global__ void regroup_index_kernel(const int64_t* counts, int S, int L, int64_t R, int32_t* index) {
  __shared__ int64_t partial[2][kThreads / 32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  for (int b = blockIdx.x; b < S * L; b += gridDim.x) {
    const int s = b / L, e = b % L;
    int64_t by_source = 0, by_expert = 0;
    for (int i = threadIdx.x; i < S * L; i += blockDim.x) {
      const int si = i / L, ei = i % L;
      if (i < b) by_source += counts[i];
      if (ei < e || (ei == e && si < s)) by_expert += counts[i];
    }
    for (int o = 16; o > 0; o >>= 1) {
      by_source += __shfl_xor_sync(0xffffffffu, by_source, o);
      by_expert += __shfl_xor_sync(0xffffffffu, by_expert, o);
    }
    if (lane == 0) partial[0][warp] = by_source, partial[1][warp] = by_expert;
    __syncthreads();
    by_source = by_expert = 0;
    for (int w = 0; w < warps; ++w) by_source += partial[0][w], by_expert += partial[1][w];
    __syncthreads();  // the partials are read before the next block overwrites them
    const int64_t n = counts[b];
    for (int64_t r = threadIdx.x; r < n; r += blockDim.x) {
      index[by_expert + r] = static_cast<int32_t>(by_source + r);
      index[R + by_source + r] = static_cast<int32_t>(by_expert + r);
    }
  }
}

int threads_for(int64_t units) { return static_cast<int>(std::min<int64_t>(kThreads, ((units + 31) / 32) * 32)); }

template <typename Unit>
void launch(const Tensor& src, const Tensor& index, const Tensor& dst, size_t row_bytes, cudaStream_t stream) {
  const int64_t N = index.dim(0), units = static_cast<int64_t>(row_bytes / sizeof(Unit));
  gather_rows_kernel<Unit><<<static_cast<unsigned>(N), threads_for(units), 0, stream>>>(
      static_cast<const Unit*>(src.data()), index.data_as<int32_t>(), units, static_cast<Unit*>(dst.data()));
  QUILL_CUDA_CHECK_LAUNCH("gather_rows_kernel");
}

template <typename Unit>
void launch_pair(const Tensor& a, const Tensor& b, const Tensor& index, const Tensor& dst, size_t row_bytes,
                 cudaStream_t stream) {
  const int64_t N = index.dim(0), units = static_cast<int64_t>(row_bytes / sizeof(Unit));
  gather_rows_from_pair_kernel<Unit><<<static_cast<unsigned>(N), threads_for(units), 0, stream>>>(
      static_cast<const Unit*>(a.data()), a.dim(0), static_cast<const Unit*>(b.data()), index.data_as<int32_t>(),
      units, static_cast<Unit*>(dst.data()));
  QUILL_CUDA_CHECK_LAUNCH("gather_rows_from_pair_kernel");
}

// The widest unit that divides the row's bytes and every base address.
size_t unit_bytes(size_t row_bytes, uintptr_t addresses) {
  for (size_t unit : {16, 8, 4, 2})
    if (row_bytes % unit == 0 && addresses % unit == 0) return unit;
  return 1;
}

void require_on_device(const char* op, const char* name, const Tensor& t) {
  QUILL_CHECK(t.defined() && t.device() == Device::CUDA, "{}: {} must be a CUDA tensor, got {}", op, name,
              t.defined() ? t.describe() : std::string("(undefined)"));
}

}  // namespace

void gather_rows(const DeviceContext& ctx, const Tensor& src_RD, const Tensor& index_N, const Tensor& dst_ND) {
  const char* op = "gather_rows";
  require_on_device(op, "src", src_RD);
  require_on_device(op, "index", index_N);
  require_on_device(op, "dst", dst_ND);
  QUILL_CHECK(src_RD.ndim() == 2, "{}: src must be 2-D [R, D], got {}", op, src_RD.describe());
  QUILL_CHECK(index_N.ndim() == 1, "{}: index must be 1-D [N], got {}", op, index_N.describe());
  ops_detail::require_dtype(op, "index", index_N, DType::I32);
  const int64_t N = index_N.dim(0);
  QUILL_CHECK(dst_ND.shape() == Shape({N, src_RD.dim(1)}) && dst_ND.dtype() == src_RD.dtype(),
              "{}: dst is {}, expected [{}, {}] {}", op, dst_ND.describe(), N, src_RD.dim(1),
              dtype_name(src_RD.dtype()));
  QUILL_CHECK(N < (int64_t{1} << 31), "{}: {} rows exceed one launch's grid", op, N);
  const size_t row_bytes = static_cast<size_t>(src_RD.dim(1)) * dtype_size(src_RD.dtype());
  if (N == 0 || row_bytes == 0) return;
  const uintptr_t addresses = reinterpret_cast<uintptr_t>(src_RD.data()) | reinterpret_cast<uintptr_t>(dst_ND.data());
  cudaStream_t stream = stream_of(ctx);
  switch (unit_bytes(row_bytes, addresses)) {
    case 16: return launch<uint4>(src_RD, index_N, dst_ND, row_bytes, stream);
    case 8: return launch<uint2>(src_RD, index_N, dst_ND, row_bytes, stream);
    case 4: return launch<uint32_t>(src_RD, index_N, dst_ND, row_bytes, stream);
    case 2: return launch<uint16_t>(src_RD, index_N, dst_ND, row_bytes, stream);
    default: return launch<uint8_t>(src_RD, index_N, dst_ND, row_bytes, stream);
  }
}

void gather_rows_from_pair(const DeviceContext& ctx, const Tensor& a_RD, const Tensor& b_SD, const Tensor& index_N,
                           const Tensor& dst_ND) {
  const char* op = "gather_rows_from_pair";
  require_on_device(op, "a", a_RD);
  require_on_device(op, "b", b_SD);
  require_on_device(op, "index", index_N);
  require_on_device(op, "dst", dst_ND);
  QUILL_CHECK(a_RD.ndim() == 2, "{}: a must be 2-D [R, D], got {}", op, a_RD.describe());
  QUILL_CHECK(b_SD.ndim() == 2 && b_SD.dim(1) == a_RD.dim(1) && b_SD.dtype() == a_RD.dtype(),
              "{}: b is {}, expected [*, {}] {} like a", op, b_SD.describe(), a_RD.dim(1), dtype_name(a_RD.dtype()));
  QUILL_CHECK(index_N.ndim() == 1, "{}: index must be 1-D [N], got {}", op, index_N.describe());
  ops_detail::require_dtype(op, "index", index_N, DType::I32);
  const int64_t N = index_N.dim(0);
  QUILL_CHECK(dst_ND.shape() == Shape({N, a_RD.dim(1)}) && dst_ND.dtype() == a_RD.dtype(),
              "{}: dst is {}, expected [{}, {}] {}", op, dst_ND.describe(), N, a_RD.dim(1), dtype_name(a_RD.dtype()));
  QUILL_CHECK(N < (int64_t{1} << 31), "{}: {} rows exceed one launch's grid", op, N);
  const size_t row_bytes = static_cast<size_t>(a_RD.dim(1)) * dtype_size(a_RD.dtype());
  if (N == 0 || row_bytes == 0) return;
  const uintptr_t addresses = reinterpret_cast<uintptr_t>(a_RD.data()) | reinterpret_cast<uintptr_t>(b_SD.data()) |
                              reinterpret_cast<uintptr_t>(dst_ND.data());
  cudaStream_t stream = stream_of(ctx);
  switch (unit_bytes(row_bytes, addresses)) {
    case 16: return launch_pair<uint4>(a_RD, b_SD, index_N, dst_ND, row_bytes, stream);
    case 8: return launch_pair<uint2>(a_RD, b_SD, index_N, dst_ND, row_bytes, stream);
    case 4: return launch_pair<uint32_t>(a_RD, b_SD, index_N, dst_ND, row_bytes, stream);
    case 2: return launch_pair<uint16_t>(a_RD, b_SD, index_N, dst_ND, row_bytes, stream);
    default: return launch_pair<uint8_t>(a_RD, b_SD, index_N, dst_ND, row_bytes, stream);
  }
}

void regroup_index(const DeviceContext& ctx, const Tensor& counts_SL, const Tensor& index_2R) {
  const char* op = "regroup_index";
  require_on_device(op, "counts", counts_SL);
  require_on_device(op, "index", index_2R);
  QUILL_CHECK(counts_SL.ndim() == 2, "{}: counts must be 2-D [S, L], got {}", op, counts_SL.describe());
  ops_detail::require_dtype(op, "counts", counts_SL, DType::I64);
  QUILL_CHECK(index_2R.ndim() == 1 && index_2R.dim(0) % 2 == 0, "{}: index must be 1-D [2R], got {}", op,
              index_2R.describe());
  ops_detail::require_dtype(op, "index", index_2R, DType::I32);
  const int64_t SL = counts_SL.numel(), R = index_2R.dim(0) / 2;
  QUILL_CHECK(SL < (int64_t{1} << 31) && R < (int64_t{1} << 31), "{}: {} blocks of {} rows exceed the I32 index", op,
              SL, R);
  if (SL == 0 || R == 0) return;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(SL, 1024));
  regroup_index_kernel<<<blocks, kThreads, 0, stream_of(ctx)>>>(counts_SL.data_as<int64_t>(),
                                                                static_cast<int>(counts_SL.dim(0)),
                                                                static_cast<int>(counts_SL.dim(1)), R,
                                                                index_2R.data_as<int32_t>());
  QUILL_CUDA_CHECK_LAUNCH("regroup_index_kernel");
}

}  // namespace quill::cuda
