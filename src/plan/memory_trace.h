// The memory plan's bookkeeping: a replay of a training step's device allocations and frees (what
// the model code allocates, in its order, derived from the layers: plan/activation_trace.h), each
// tagged with what it is for, keeping the most bytes live at once and what was live at that moment.
// Counts requested bytes, as the CPU and CUDA allocators' counters do (tensor/tracking_allocator.h,
// ops/cuda/memory_stats.h).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace quill::plan {

// What a dynamic allocation is for (the rows of the plan's table).
enum class Use {
  Saved,      // activations kept from a forward for its backward
  Logits,     // the LM head's logits and loss chunks (and the head's other row buffers)
  Attention,  // the attention kernels' scratch (relative-bias rows, their gradient, dq accumulators)
  Dispatch,   // the expert dispatcher's send and receive buffers (expert parallelism)
  Gather,     // tensor/sequence parallelism: all-gathered inputs and partial outputs before reduction
  Temporary,  // everything else a pass allocates and frees: the backward's gradients, forward scratch
  Pipeline,   // pipeline messages: activations and gradients sent to or received from a neighbour stage
  kCount
};
const char* use_name(Use use);
constexpr size_t kUses = static_cast<size_t>(Use::kCount);
using UseBytes = std::array<int64_t, kUses>;

class MemoryTrace {
 public:
  using Id = int64_t;
  static constexpr Id kNone = -1;

  explicit MemoryTrace(int64_t resident_bytes = 0) : resident_(resident_bytes) {}
  Id alloc(Use use, int64_t bytes);
  void free(Id id);            // kNone: nothing; a second free of one id throws (a plan bug)
  void retag(Id id, Use use);  // the same bytes, now counted as another use (a result that is kept)
  // An allocation that lives only while one op runs.
  void spike(Use use, int64_t bytes) { free(alloc(use, bytes)); }

  int64_t live() const { return live_; }  // dynamic bytes live now
  int64_t peak() const { return peak_; }  // most dynamic bytes live at once
  const UseBytes& at_peak() const { return at_peak_; }
  const UseBytes& live_by_use() const { return by_use_; }
  int64_t resident() const { return resident_; }
  // Throws naming the first allocation still live (every pass must free what it allocates).
  void expect_empty(const std::string& what) const;

 private:
  int64_t resident_ = 0;
  std::vector<int64_t> bytes_;
  std::vector<Use> use_;
  std::vector<bool> freed_;
  UseBytes by_use_{}, at_peak_{};
  int64_t live_ = 0, peak_ = 0;
};

}  // namespace quill::plan
