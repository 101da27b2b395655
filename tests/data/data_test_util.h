// Helpers for the data tests: a fresh temporary directory per test, and small builders.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.h"
#include "base/rng.h"
#include "data/build_rows.h"

namespace quill::test {

// A directory under the system temp folder, unique to this process and test, removed on exit.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string("quill_data_") + info->test_suite_name() + "_" + info->name() + "_" +
                       std::to_string(::getpid()) + "_" + std::to_string(counter_++);
    path_ = std::filesystem::temp_directory_path() / name;
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string str() const { return path_.string(); }
  std::string sub(const std::string& name) const { return (path_ / name).string(); }

 private:
  static inline int counter_ = 0;
  std::filesystem::path path_;
};

// Expects `fn` to throw quill::Error whose message contains every one of `needles`.
template <typename Fn>
void expect_error(Fn&& fn, std::initializer_list<std::string> needles) {
  try {
    fn();
  } catch (const quill::Error& e) {
    std::string msg = e.what();
    for (const std::string& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "message: " << msg << "\nmissing: " << n;
    return;
  }
  ADD_FAILURE() << "expected a quill::Error";
}

// Standard base64 with padding (for writing tiktoken rank files).
inline std::string base64(std::string_view bytes) {
  static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    uint32_t v = (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8) | uint8_t(bytes[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out += k[(v >> s) & 63];
  }
  if (i + 1 == bytes.size()) {
    uint32_t v = uint8_t(bytes[i]) << 16;
    out += std::string{k[(v >> 18) & 63], k[(v >> 12) & 63], '=', '='};
  } else if (i + 2 == bytes.size()) {
    uint32_t v = (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8);
    out += std::string{k[(v >> 18) & 63], k[(v >> 12) & 63], k[(v >> 6) & 63], '='};
  }
  return out;
}

// A rank file: the 256 bytes, then random concatenations of earlier tokens drawn from text-like
// pieces (letters, digits, spaces, newlines, punctuation), so that words merge over many steps.
inline std::string random_ranks(uint64_t seed) {
  SplitMix64 rng(seed);
  std::vector<std::string> tokens;
  std::map<std::string, bool> seen;
  for (int b = 0; b < 256; ++b) {
    tokens.emplace_back(1, static_cast<char>(b));
    seen[tokens.back()] = true;
  }
  std::vector<std::string> pool = {"a", "b", "e", "t", "1", " ", "\n", ".", "T", " t", "\n\n"};
  while (tokens.size() < 2000) {
    std::string t = pool[rng.below(pool.size())] + pool[rng.below(pool.size())];
    if (t.size() > 12 || seen.count(t)) continue;
    seen[t] = true;
    tokens.push_back(t);
    pool.push_back(t);
  }
  std::string out;
  for (size_t r = 0; r < tokens.size(); ++r) out += base64(tokens[r]) + " " + std::to_string(r) + "\n";
  return out;
}

// Build options of the data tests: `threads` threads, rows of `row_tokens`, at most max_rows.
inline BuildOptions build_options(int threads, int64_t row_tokens = 64, int64_t max_rows = -1) {
  BuildOptions o;
  o.row_tokens = row_tokens;
  o.max_rows = max_rows;
  o.threads = threads;
  o.source = "test";
  return o;
}

}  // namespace quill::test
