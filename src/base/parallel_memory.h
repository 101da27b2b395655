// memcpy and memset of large host buffers on all cores: one thread's copy bandwidth is a fraction of the
// machine's (the H200 host: 11 GB/s on one thread, 88 GB/s on 16), and start-up copies and clears tens of
// GB (a rank's masters into pinned memory, its offloaded optimizer state).
#pragma once

#include <cstddef>

namespace quill {

// Below 64 MiB, or with one thread, the plain call; above, 64 MiB pieces over hardware_threads() threads.
void parallel_memcpy(void* dst, const void* src, size_t bytes);
void parallel_memset_zero(void* dst, size_t bytes);

}  // namespace quill
