#include "plan/memory_trace.h"

#include "base/error.h"

namespace quill::plan {

const char* use_name(Use use) {
  switch (use) {
    case Use::Saved: return "saved activations";
    case Use::Logits: return "logits and loss chunks";
    case Use::Attention: return "attention scratch";
    case Use::Dispatch: return "MoE dispatch buffers";
    case Use::Gather: return "TP/SP gathers";
    case Use::Temporary: return "pass temporaries";
    case Use::Pipeline: return "pipeline messages";
    case Use::kCount: break;
  }
  return "?";
}

MemoryTrace::Id MemoryTrace::alloc(Use use, int64_t bytes) {
  QUILL_CHECK(bytes >= 0, "memory plan: negative allocation of {} bytes", bytes);
  bytes_.push_back(bytes);
  use_.push_back(use);
  freed_.push_back(false);
  by_use_[static_cast<size_t>(use)] += bytes;
  live_ += bytes;
  if (live_ > peak_) {
    peak_ = live_;
    at_peak_ = by_use_;
  }
  return static_cast<Id>(bytes_.size()) - 1;
}

void MemoryTrace::free(Id id) {
  if (id == kNone) return;
  const size_t i = static_cast<size_t>(id);
  QUILL_CHECK(id >= 0 && i < bytes_.size() && !freed_[i], "memory plan: allocation {} freed twice or never made", id);
  freed_[i] = true;
  by_use_[static_cast<size_t>(use_[i])] -= bytes_[i];
  live_ -= bytes_[i];
}

void MemoryTrace::retag(Id id, Use use) {
  const size_t i = static_cast<size_t>(id);
  QUILL_CHECK(id >= 0 && i < bytes_.size() && !freed_[i], "memory plan: retag of allocation {} that is not live", id);
  by_use_[static_cast<size_t>(use_[i])] -= bytes_[i];
  use_[i] = use;
  by_use_[static_cast<size_t>(use)] += bytes_[i];
}

void MemoryTrace::expect_empty(const std::string& what) const {
  for (size_t i = 0; i < bytes_.size(); ++i)
    QUILL_CHECK(freed_[i], "memory plan: {}: allocation {} ({}, {} bytes) is never freed", what, i,
                use_name(use_[i]), bytes_[i]);
}

}  // namespace quill::plan
