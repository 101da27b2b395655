// The host allocator: zeros of any size read as zeros and are 64-byte aligned; from 1 MiB up they are
// (8 MiB and up) pages of their own that do not exist until written (a rank's tables of zeros cost nothing until used,
// and are then faulted in by the threads that write them); the tracking allocator counts them as requested.
#include <gtest/gtest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "tensor/tensor.h"
#include "tensor/tracking_allocator.h"

namespace quill {
namespace {

bool all_zero(const Tensor& t) {
  const auto* b = static_cast<const unsigned char*>(t.data());
  for (size_t i = 0; i < t.nbytes(); ++i)
    if (b[i] != 0) return false;
  return true;
}

// Pages of [p, p + bytes) resident in memory (mincore).
size_t resident_pages(const void* p, size_t bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const auto start = reinterpret_cast<uintptr_t>(p) / page * page;
  const size_t pages = (reinterpret_cast<uintptr_t>(p) + bytes - start + page - 1) / page;
  std::vector<unsigned char> v(pages);
  EXPECT_EQ(mincore(reinterpret_cast<void*>(start), pages * page, v.data()), 0);
  size_t n = 0;
  for (unsigned char c : v) n += c & 1;
  return n;
}

TEST(HostAllocator, ZerosOfEverySizeReadZeroAndAreAligned) {
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{1000}, int64_t{262127}, int64_t{2097136}, int64_t{2097152}, int64_t{3000001}}) {
    // Dirty the allocator first, so that a small zeros reusing freed memory has to clear it.
    {
      Tensor dirty = Tensor::empty({n + 16}, DType::F32);
      if (dirty.nbytes()) std::memset(dirty.data(), 0xab, dirty.nbytes());
    }
    const Tensor t = Tensor::zeros({n}, DType::F32);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data()) % 64, 0u) << n;
    EXPECT_TRUE(all_zero(t)) << n << " elements";
    if (n) {
      t.data_as<float>()[n - 1] = 1.0f;  // writable to the last element
      EXPECT_EQ(t.data_as<float>()[n - 1], 1.0f);
    }
  }
}

TEST(HostAllocator, LargeZerosExistOnlyOnceWritten) {
  const int64_t n = int64_t{64} << 18;  // 64 MiB of fp32
  const Tensor t = Tensor::zeros({n}, DType::F32);
  const size_t pages = t.nbytes() / static_cast<size_t>(sysconf(_SC_PAGESIZE));
  EXPECT_LT(resident_pages(t.data(), t.nbytes()), pages / 8) << "zeros of 64 MiB were written at allocation";
  for (int64_t i = 0; i < n; i += 4096) t.data_as<float>()[i] = 2.0f;
  EXPECT_EQ(resident_pages(t.data(), t.nbytes()), pages);
  EXPECT_EQ(t.data_as<float>()[4096], 2.0f);
  EXPECT_EQ(t.data_as<float>()[4097], 0.0f);
}

TEST(TrackingAllocator, CountsZeroedAllocationsAsRequested) {
  TrackingAllocator alloc;
  {
    const Tensor big = Tensor::zeros({int64_t{1} << 22}, DType::F32, alloc);
    const Tensor small = Tensor::zeros({3}, DType::F32, alloc);
    EXPECT_EQ(alloc.in_use(), (int64_t{16} << 20) + 12);
    EXPECT_TRUE(all_zero(big));
    EXPECT_TRUE(all_zero(small));
  }
  EXPECT_EQ(alloc.in_use(), 0);
  EXPECT_EQ(alloc.peak(), (int64_t{16} << 20) + 12);
}

}  // namespace
}  // namespace quill
