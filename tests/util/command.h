// Running a command from a test: through the shell, with no standard input (an mpirun waiting on it
// once hung at exit), stdout and stderr together. The status is the exit code, or 128 + the signal
// that ended it.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace quill::test {

struct CommandResult {
  int status;
  std::string output;  // stdout and stderr together
};

inline CommandResult run_command(const std::string& cmd) {
  FILE* pipe = popen((cmd + " 2>&1 </dev/null").c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), pipe)) out.append(buf.data(), n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), out};
}

}  // namespace quill::test
