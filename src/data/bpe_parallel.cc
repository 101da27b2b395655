// BpeTokenizer::encode_parallel: the text's chunks (text_chunks.h) are encoded on the shared thread
// pool, each thread appending the ids of the chunks it takes to a buffer of its own, and then
// copied into the output in parallel.
//
// v7 (v6 measured 5.87x on 16 threads of the 16-core host, whose independent processes gave
// 10.45x; bench/results/2026-11-30-callE). What changed, and why:
// - Nothing that grows with the text is serial any more: each thread finds the cuts of the chunks
//   it takes (v6 found them first, on one thread: 0.01 ms on the mixed corpus, but a scan of the
//   whole text when newlines are rare), and the output is sized once in the caller's vector,
//   which a repeated caller reuses (v6 zero-filled and page-faulted a new 36 MB vector on one
//   thread: 14 ms of a 260 ms two-thread call on the 2-core machine; at the same cost, ~10% of a
//   16-thread call on the 16-core host).
// - Per-thread buffers kept from call to call instead of a new vector per chunk: no malloc, mmap,
//   page faults or munmap (whose TLB shootdowns interrupt every thread) inside the loop, and no
//   false sharing (v6's per-chunk vector headers sat side by side, and every id appended by one
//   thread wrote the cache line that its neighbours' threads were writing too).
// - About 32 chunks a thread instead of 8: chunks are taken in order, so a shorter last chunk
//   means a shorter tail in which some threads have nothing left to do.
#include <algorithm>
#include <atomic>
#include <chrono>

#include "data/bpe_tokenizer.h"
#include "base/thread_pool.h"
#include "data/text_chunks.h"

namespace quill {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// The ids one thread encoded during one call; kept, with their storage, for the next call.
struct ThreadIds {
  uint64_t call = 0;
  std::vector<uint32_t> ids;
};
thread_local ThreadIds thread_ids;
std::atomic<uint64_t> next_call{1};

// A buffer that a very large call grew past this is freed afterwards rather than kept.
constexpr size_t kKeepIds = size_t{16} << 20;  // 64 MiB of ids

// One chunk's result. A cache line each: neighbouring chunks finish on different threads.
struct alignas(64) ChunkIds {
  ThreadIds* owner = nullptr;  // nullptr: an empty chunk
  size_t offset = 0, count = 0;
  double start = 0, end = 0;  // seconds since the encode loop began
};

size_t auto_chunk_bytes(size_t text_size, int threads) {
  // About 32 chunks a thread, so threads finish within about a 32nd of their share of each other;
  // at least 16 KiB, so that a chunk's fixed costs (taking it, two clock reads, finding its cuts)
  // stay far below its encode time (~0.5 ms at 35 MB/s).
  return std::max<size_t>(size_t{16} << 10, text_size / (static_cast<size_t>(threads) * 32));
}

// Wake-up and tail idle time per thread, from the chunks' start and end times.
void thread_idle(const std::vector<ChunkIds>& chunks, int threads, double wall, ParallelEncodeStats& s) {
  struct Span {
    const ThreadIds* owner;
    double first, last;
  };
  std::vector<Span> spans;
  for (const ChunkIds& c : chunks) {
    if (c.owner == nullptr) continue;
    s.busy_seconds += c.end - c.start;
    ++s.chunks;
    auto it = std::find_if(spans.begin(), spans.end(), [&](const Span& x) { return x.owner == c.owner; });
    if (it == spans.end()) spans.push_back({c.owner, c.start, c.end});
    else {
      it->first = std::min(it->first, c.start);
      it->last = std::max(it->last, c.end);
    }
  }
  // A thread that took no chunk was idle all along.
  s.start_idle_seconds = wall * static_cast<double>(threads - static_cast<int>(spans.size()));
  for (const Span& x : spans) {
    s.start_idle_seconds += x.first;
    s.end_idle_seconds += wall - x.last;
  }
}

}  // namespace

void BpeTokenizer::encode_parallel(std::string_view text, const ParallelEncodeOptions& options,
                                   std::vector<uint32_t>& out) const {
  const Clock::time_point t0 = Clock::now();
  const int threads = options.threads > 0 ? options.threads : hardware_threads();
  const size_t chunk_bytes = options.chunk_bytes > 0 ? options.chunk_bytes : auto_chunk_bytes(text.size(), threads);
  const size_t n_chunks = chunk_count(text.size(), chunk_bytes);
  if (threads == 1 || !safe_cuts_ || n_chunks < 2) {
    out.clear();  // keeps the storage
    encode_append(text, out);
    if (options.stats != nullptr) {
      ParallelEncodeStats s;
      s.chunks = text.empty() ? 0 : 1;
      s.seconds = s.encode_seconds = s.busy_seconds = seconds_between(t0, Clock::now());
      *options.stats = s;
    }
    return;
  }
  const uint64_t call = next_call.fetch_add(1, std::memory_order_relaxed);
  std::vector<ChunkIds> chunks(n_chunks);
  // The shared pool keeps its workers (and their thread-local caches and buffers) between calls.
  SharedThreadPool shared(threads);
  ThreadPool& pool = shared.pool();
  const Clock::time_point t1 = Clock::now();
  pool.parallel_for(n_chunks, [&](size_t j) {
    const Clock::time_point start = Clock::now();
    const TextChunk c = text_chunk(text, chunk_bytes, j);
    if (c.begin == c.end) return;
    ThreadIds& mine = thread_ids;
    if (mine.call != call) {
      mine.call = call;
      mine.ids.clear();
    }
    const size_t before = mine.ids.size();
    encode_append(text.substr(c.begin, c.end - c.begin), mine.ids);
    chunks[j] = {&mine, before, mine.ids.size() - before, seconds_between(t1, start), seconds_between(t1, Clock::now())};
  });
  const Clock::time_point t2 = Clock::now();
  std::vector<size_t> offsets(n_chunks + 1, 0);  // the one serial pass: per chunk, not per byte
  for (size_t j = 0; j < n_chunks; ++j) offsets[j + 1] = offsets[j] + chunks[j].count;
  const size_t total = offsets[n_chunks];
  if (out.capacity() < total) out.clear();  // it reallocates: nothing old worth moving
  out.resize(total);                         // zero-fills only beyond the old size
  const Clock::time_point t3 = Clock::now();
  pool.parallel_for(n_chunks, [&](size_t j) {
    const ChunkIds& c = chunks[j];
    if (c.count > 0) std::copy_n(c.owner->ids.data() + c.offset, c.count, out.data() + offsets[j]);
  });
  const Clock::time_point t4 = Clock::now();
  for (const ChunkIds& c : chunks) {
    if (c.owner != nullptr && c.owner->ids.capacity() > kKeepIds) std::vector<uint32_t>().swap(c.owner->ids);
  }
  if (options.stats != nullptr) {
    ParallelEncodeStats s;
    s.threads = pool.threads();
    s.chunk_bytes = chunk_bytes;
    s.encode_seconds = seconds_between(t1, t2);
    s.resize_seconds = seconds_between(t2, t3);
    s.copy_seconds = seconds_between(t3, t4);
    thread_idle(chunks, s.threads, s.encode_seconds, s);
    s.seconds = seconds_between(t0, Clock::now());
    *options.stats = s;
  }
}

std::vector<uint32_t> BpeTokenizer::encode_parallel(std::string_view text, int threads) const {
  std::vector<uint32_t> out;
  ParallelEncodeOptions options;
  options.threads = threads;
  encode_parallel(text, options, out);
  return out;
}

}  // namespace quill
