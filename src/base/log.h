// Logging to stderr with a level; progress displays write to stdout themselves.
#pragma once

#include <fmt/format.h>

#include <cstdio>

namespace quill {

enum class LogLevel { Debug = 0, Info = 1, Warn = 2, Error = 3 };

LogLevel log_level();
void set_log_level(LogLevel level);
void log_line(LogLevel level, const std::string& text);

template <typename... Args>
void log_info(fmt::format_string<Args...> f, Args&&... args) {
  if (log_level() <= LogLevel::Info) log_line(LogLevel::Info, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void log_warn(fmt::format_string<Args...> f, Args&&... args) {
  if (log_level() <= LogLevel::Warn) log_line(LogLevel::Warn, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void log_debug(fmt::format_string<Args...> f, Args&&... args) {
  if (log_level() <= LogLevel::Debug) log_line(LogLevel::Debug, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace quill
