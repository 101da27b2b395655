// parallel_memcpy / parallel_memset_zero: the same bytes as memcpy / memset for sizes below, at and across the
// 64 MiB pieces (a last piece of a few bytes, unaligned starts).
#include "base/parallel_memory.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace quill {
namespace {

TEST(ParallelMemory, CopiesAndClearsEveryByteOfAnySize) {
  const size_t piece = size_t{64} << 20;
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{4097}, piece, piece + 13, 2 * piece + piece / 3 + 7}) {
    std::vector<uint8_t> src(bytes + 3), dst(bytes + 3, 0xee);
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 2654435761u >> 13);
    parallel_memcpy(dst.data() + 1, src.data() + 2, bytes);  // unaligned on both sides
    EXPECT_EQ(dst[0], 0xee);
    EXPECT_EQ(std::memcmp(dst.data() + 1, src.data() + 2, bytes), 0) << bytes << " bytes";
    EXPECT_EQ(dst[bytes + 1], 0xee) << "wrote past the end";
    parallel_memset_zero(dst.data() + 1, bytes);
    EXPECT_EQ(dst[0], 0xee);
    for (size_t i = 1; i <= bytes; i += 4093) ASSERT_EQ(dst[i], 0) << bytes << " bytes, at " << i;
    if (bytes) EXPECT_EQ(dst[bytes], 0);
    EXPECT_EQ(dst[bytes + 1], 0xee) << "cleared past the end";
  }
}

}  // namespace
}  // namespace quill
