// The machine's physical memory, for checking a model's size before allocating it.
#pragma once

#include <cstdint>

namespace quill {

// Physical memory in bytes (sysconf pages x page size); 0 if the system does not say.
uint64_t host_memory_bytes();

}  // namespace quill
