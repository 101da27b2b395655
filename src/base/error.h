// Errors: one exception type carrying one clear message, and CHECK macros that build it.
// Bad input (a file, a field, a tensor) is reported by naming it in the message; the CLI prints
// the message and exits nonzero. No CUDA here.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace quill {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

[[noreturn]] void throw_error(const std::string& message);

}  // namespace quill

// QUILL_CHECK(cond, "format {}", args...): throws quill::Error with the formatted message.
#define QUILL_CHECK(cond, ...)                                  \
  do {                                                          \
    if (!(cond)) ::quill::throw_error(::fmt::format(__VA_ARGS__)); \
  } while (0)

#define QUILL_FAIL(...) ::quill::throw_error(::fmt::format(__VA_ARGS__))
