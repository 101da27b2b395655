#include "base/log.h"

#include <atomic>

namespace quill {

namespace {
// The one piece of process state in base: the verbosity chosen on the command line.
std::atomic<int> g_level{static_cast<int>(LogLevel::Info)};
}  // namespace

LogLevel log_level() { return static_cast<LogLevel>(g_level.load()); }
void set_log_level(LogLevel level) { g_level.store(static_cast<int>(level)); }

void log_line(LogLevel level, const std::string& text) {
  static const char* names[] = {"debug", "info", "warn", "error"};
  std::fprintf(stderr, "[quill %s] %s\n", names[static_cast<int>(level)], text.c_str());
}

}  // namespace quill
