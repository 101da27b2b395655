#include "tensor/tracking_allocator.h"

namespace quill {

void* TrackingAllocator::allocate(size_t bytes) {
  void* p = inner_.allocate(bytes);
  // Atomic: tensors may be freed from another thread (the thread pool's tasks hold views).
  const int64_t now = in_use_.fetch_add(static_cast<int64_t>(bytes)) + static_cast<int64_t>(bytes);
  int64_t peak = peak_.load();
  while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
  }
  return p;
}

void TrackingAllocator::deallocate(void* ptr, size_t bytes) {
  inner_.deallocate(ptr, bytes);
  in_use_.fetch_sub(static_cast<int64_t>(bytes));
}

}  // namespace quill
