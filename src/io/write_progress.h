// Progress of a checkpoint write (base/progress.h) by bytes: each item counts as written when the
// writer reaches it (its producer is called then; the bytes in flight behind it are bounded), so that
// the Hugging Face export and the training checkpoint's save show one kind of line.
#pragma once

#include <vector>

#include "base/progress.h"
#include "io/safetensors.h"

namespace quill {

// Wraps each item's producer to count its bytes into `progress` (which must outlive the write).
void count_written_bytes(std::vector<SafetensorsItem>& items, Progress& progress);

}  // namespace quill
