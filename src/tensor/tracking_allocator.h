// An Allocator that counts the bytes it hands out, over another allocator: what is live now and the
// most that was live at once since the last reset. The CPU backend's counterpart of the CUDA device
// allocator's counters (ops/cuda/memory_stats.h), so that `quill train --device cpu` reports the peak
// the memory plan (plan/) predicts. Counts requested bytes, not the 64-byte rounding underneath.
#pragma once

#include <atomic>
#include <cstdint>

#include "tensor/tensor.h"

namespace quill {

class TrackingAllocator final : public Allocator {
 public:
  explicit TrackingAllocator(Allocator& inner = host_allocator()) : inner_(inner) {}
  void* allocate(size_t bytes) override;
  void* allocate_zeroed(size_t bytes) override;
  void deallocate(void* ptr, size_t bytes) override;
  Device device() const override { return inner_.device(); }

  int64_t in_use() const { return in_use_.load(); }
  int64_t peak() const { return peak_.load(); }
  // Starts a new peak from what is live now.
  void reset_peak() { peak_.store(in_use_.load()); }

 private:
  Allocator& inner_;
  std::atomic<int64_t> in_use_{0}, peak_{0};
};

}  // namespace quill
