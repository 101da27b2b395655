// Incremental SHA-256, and the same on a background thread. rows_sha256 (rows.h) is one SHA-256
// over every row in order, so it cannot be split over threads; the data build hashes on a thread
// of its own, in jobs that also write the rows, while the pool renders the next conversations,
// so the hash costs the build only what is left of it after the last rows are rendered. A training
// checkpoint hashes each shard the same way while its threads write it (io/safetensors.h).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

typedef struct evp_md_ctx_st EVP_MD_CTX;

namespace quill {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void update(const void* data, size_t n);
  // Lowercase hex of the digest; call once.
  std::string hex();

 private:
  EVP_MD_CTX* ctx_;
};

// The SHA-256 (lowercase hex) of a file's bytes, read in 4 MiB pieces; throws naming the file.
std::string sha256_file_hex(const std::string& path);

// Hashes jobs in the order they are queued, on its own thread. A job is a function that feeds
// bytes to the hash (sha.update(...)); whatever it reads must stay valid until wait(ticket) for
// its ticket returns. A job may do other work besides hashing (it runs off the caller's thread).
// Without a thread of its own (a build on one thread), push() runs the job at once instead.
class BackgroundSha256 {
 public:
  using Job = std::function<void(Sha256& sha)>;

  explicit BackgroundSha256(bool own_thread = true);
  ~BackgroundSha256();  // waits for the queued jobs
  BackgroundSha256(const BackgroundSha256&) = delete;
  BackgroundSha256& operator=(const BackgroundSha256&) = delete;

  // Queues a job (or runs it, without a thread); returns its ticket (1, 2, ...).
  uint64_t push(Job job);
  // Returns once job `ticket` and every job before it have run; rethrows the first job error.
  void wait(uint64_t ticket);
  // Waits for every job and returns the digest; call once.
  std::string hex();
  // Seconds the thread spent running jobs.
  double busy_seconds() const;

 private:
  void loop();
  void run(Job& job);  // runs it unless a job failed before; records its error and time

  Sha256 sha_;
  mutable std::mutex mu_;
  std::condition_variable wake_, done_;
  std::deque<Job> jobs_;
  uint64_t pushed_ = 0, finished_ = 0;
  double busy_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
  std::thread thread_;
};

}  // namespace quill
