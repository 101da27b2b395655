#include "base/parallel_memory.h"

#include <algorithm>
#include <cstring>

#include "base/thread_pool.h"

namespace quill {

namespace {
constexpr size_t kPiece = size_t{64} << 20;

template <typename Fn>
void by_pieces(size_t bytes, const Fn& fn) {
  const size_t pieces = (bytes + kPiece - 1) / kPiece;
  if (pieces <= 1 || hardware_threads() == 1) return fn(size_t{0}, bytes);
  parallel_for(pieces, hardware_threads(), [&](size_t i) { fn(i * kPiece, std::min(kPiece, bytes - i * kPiece)); });
}
}  // namespace

void parallel_memcpy(void* dst, const void* src, size_t bytes) {
  by_pieces(bytes, [&](size_t at, size_t n) {
    std::memcpy(static_cast<char*>(dst) + at, static_cast<const char*>(src) + at, n);
  });
}

void parallel_memset_zero(void* dst, size_t bytes) {
  by_pieces(bytes, [&](size_t at, size_t n) { std::memset(static_cast<char*>(dst) + at, 0, n); });
}

}  // namespace quill
