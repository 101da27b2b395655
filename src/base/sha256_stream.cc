#include "base/sha256_stream.h"

#include <openssl/evp.h>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

#include "base/error.h"

namespace quill {

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  QUILL_CHECK(ctx_ != nullptr && EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr) == 1, "SHA-256: init failed");
}

Sha256::~Sha256() { EVP_MD_CTX_free(ctx_); }

void Sha256::update(const void* data, size_t n) { EVP_DigestUpdate(ctx_, data, n); }

std::string Sha256::hex() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx_, digest, &len);
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < len; ++i) {
    out.push_back(kHex[digest[i] >> 4]);
    out.push_back(kHex[digest[i] & 15]);
  }
  return out;
}

std::string sha256_file_hex(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  QUILL_CHECK(fd >= 0, "{}: cannot open ({})", path, std::strerror(errno));
  Sha256 sha;
  std::vector<char> buf(4 << 20);
  for (;;) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      QUILL_FAIL("{}: read failed ({})", path, std::strerror(err));
    }
    if (n == 0) break;
    sha.update(buf.data(), static_cast<size_t>(n));
  }
  ::close(fd);
  return sha.hex();
}

BackgroundSha256::BackgroundSha256(bool own_thread) {
  if (own_thread) thread_ = std::thread([this] { loop(); });
}

BackgroundSha256::~BackgroundSha256() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

uint64_t BackgroundSha256::push(Job job) {
  if (!thread_.joinable()) {
    ++pushed_;
    run(job);
    return pushed_;
  }
  uint64_t ticket;
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back(std::move(job));
    ticket = ++pushed_;
  }
  wake_.notify_all();
  return ticket;
}

void BackgroundSha256::run(Job& job) {
  auto start = std::chrono::steady_clock::now();
  std::exception_ptr error;
  if (!error_) {  // after a failure the hash is meaningless: later jobs only count as done
    try {
      job(sha_);
    } catch (...) {
      error = std::current_exception();
    }
  }
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (error && !error_) error_ = error;
    busy_ += s;
    ++finished_;
  }
  done_.notify_all();
}

void BackgroundSha256::loop() {
  while (true) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return !jobs_.empty() || stop_; });
      if (jobs_.empty()) return;  // stop_ and nothing left
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    run(job);
  }
}

void BackgroundSha256::wait(uint64_t ticket) {
  std::unique_lock<std::mutex> lock(mu_);
  done_.wait(lock, [&] { return finished_ >= ticket; });
  if (error_) std::rethrow_exception(error_);
}

std::string BackgroundSha256::hex() {
  uint64_t last;
  {
    std::lock_guard<std::mutex> lock(mu_);
    last = pushed_;
  }
  wait(last);
  return sha_.hex();
}

double BackgroundSha256::busy_seconds() const {
  std::lock_guard<std::mutex> lock(mu_);
  return busy_;
}

}  // namespace quill
