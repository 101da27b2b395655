// Options and measurements of BpeTokenizer::encode_parallel (bpe_parallel.cc).
#pragma once

#include <cstddef>

namespace quill {

// Where the time of one parallel encode went. Sums over threads are thread-seconds; the ideal
// is busy_seconds == threads * encode_seconds, and the three idle sums say what was lost.
struct ParallelEncodeStats {
  int threads = 1;             // threads of the pool (1: the serial path)
  size_t chunks = 0;           // nonempty chunks encoded
  size_t chunk_bytes = 0;      // the interval size (0: the serial path)
  double seconds = 0;          // the whole call
  double encode_seconds = 0;   // the parallel encode loop, wall clock
  double resize_seconds = 0;   // sizing the output (serial; 0 when it already had room and size)
  double copy_seconds = 0;     // the parallel copy of the chunks' ids into the output
  double busy_seconds = 0;     // the chunks' encode times, summed
  double start_idle_seconds = 0;  // threads waiting for their first chunk (wake-up), summed
  double end_idle_seconds = 0;    // threads done while others still encode (tail), summed
};

struct ParallelEncodeOptions {
  int threads = 0;          // <= 0: all cores
  size_t chunk_bytes = 0;   // 0: automatic (about 32 chunks a thread, at least 16 KiB)
  ParallelEncodeStats* stats = nullptr;  // filled in when given
};

}  // namespace quill
