// Writing one large file from several threads: the caller hands over byte ranges in any order
// (each at its offset, with the memory that holds it), worker threads pwrite them, and finish()
// waits for all. One thread copying into the page cache and waiting on the disk writes a 52 GB
// checkpoint far below the disk's speed; several keep the device busy
// (bench/results/2026-12-01-checkpoint-write/ has the measurement against dd on the same disk).
// The bytes in flight are bounded, so a producer that makes each range (a bf16 conversion) runs
// ahead of the disk by at most that much.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace quill {

// min(8, hardware threads): enough to keep an NVMe device busy, few enough for a shared host.
int default_write_threads();

class ParallelFileWriter {
 public:
  // fd stays owned by the caller. threads <= 0: default_write_threads().
  ParallelFileWriter(int fd, std::string path, int threads = 0, size_t max_inflight_bytes = size_t{1} << 30);
  ~ParallelFileWriter();  // waits for the workers (errors are reported by finish())
  ParallelFileWriter(const ParallelFileWriter&) = delete;
  ParallelFileWriter& operator=(const ParallelFileWriter&) = delete;

  // Queues bytes [data, data + n) for offset; `keep` keeps that memory alive until written. Large
  // ranges are split into chunks for the workers. Blocks while too many bytes are in flight.
  void write(uint64_t offset, const void* data, size_t n, std::shared_ptr<const void> keep);
  // Waits for every queued range; throws the first write error, naming the path.
  void finish();

 private:
  struct Chunk {
    uint64_t offset;
    const char* data;
    size_t n;
    std::shared_ptr<const void> keep;
  };
  void work();

  int fd_;
  std::string path_;
  size_t max_inflight_;
  std::mutex mu_;
  std::condition_variable has_work_, has_room_, idle_;
  std::deque<Chunk> queue_;
  size_t inflight_ = 0;  // queued or being written
  bool stop_ = false;
  std::exception_ptr error_;
  std::vector<std::thread> workers_;
};

}  // namespace quill
