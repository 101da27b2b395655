// A command started in the background (exec'd by the shell, so its pid is the command's), its output
// into `log`: the pid to signal, and at the end its status (128 + the signal when a signal ended it,
// else its exit code) and output.
#pragma once

#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "base/file_util.h"
#include "util/command.h"

namespace quill::test {

class Background {
 public:
  Background(const std::string& cmd, const std::string& log) : log_(log) {
    pid_ = ::fork();
    if (pid_ == 0) {
      const std::string line = "exec " + cmd + " > '" + log_ + "' 2>&1 < /dev/null";
      ::execl("/bin/sh", "sh", "-c", line.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
  }
  pid_t pid() const { return pid_; }
  CommandResult finish() {
    int status = 0;
    ::waitpid(pid_, &status, 0);
    return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), quill::read_file(log_)};
  }

 private:
  std::string log_;
  pid_t pid_ = -1;
};

}  // namespace quill::test
