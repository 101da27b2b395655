#include "tensor/tracking_allocator.h"

namespace quill {

namespace {
// Atomic: tensors may be freed from another thread (the thread pool's tasks hold views).
void count(std::atomic<int64_t>& in_use, std::atomic<int64_t>& peak, size_t bytes) {
  const int64_t now = in_use.fetch_add(static_cast<int64_t>(bytes)) + static_cast<int64_t>(bytes);
  int64_t seen = peak.load();
  while (now > seen && !peak.compare_exchange_weak(seen, now)) {
  }
}
}  // namespace

void* TrackingAllocator::allocate(size_t bytes) {
  void* p = inner_.allocate(bytes);
  count(in_use_, peak_, bytes);
  return p;
}

// Counted as requested, whether or not its pages exist yet: the plan predicts requested bytes.
void* TrackingAllocator::allocate_zeroed(size_t bytes) {
  void* p = inner_.allocate_zeroed(bytes);
  if (p) count(in_use_, peak_, bytes);
  return p;
}

void TrackingAllocator::deallocate(void* ptr, size_t bytes) {
  inner_.deallocate(ptr, bytes);
  in_use_.fetch_sub(static_cast<int64_t>(bytes));
}

}  // namespace quill
