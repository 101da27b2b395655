// Running another program (quill itself, for `quill tune --measure`) as a child process: no shell, no
// standard input, its stdout and stderr into a log file, in its own process group so that a time limit
// ends it and everything it started. Whatever the child does (runs out of memory, crashes, hangs), the
// caller gets a result back, never the child's fate.
#pragma once

#include <string>
#include <vector>

namespace quill {

struct ChildResult {
  int exit_code = -1;      // its exit status when it exited (else -1)
  int signal = 0;          // the signal that ended it (0: it exited)
  bool timed_out = false;  // ended by us after the time limit (signal is then SIGKILL)
  bool started = true;     // false: the program could not be executed (exit_code 127)
  double seconds = 0;      // wall time
  bool ok() const { return exit_code == 0 && signal == 0 && !timed_out; }
  // "exit status 1", "killed by signal 11 (Segmentation fault)", "timed out after 30 s (killed)".
  std::string describe() const;
};

// Runs argv[0] (a path; not searched in PATH) with `argv`, stdin from /dev/null, stdout and stderr appended
// to `log_path` (created). With timeout_s > 0 the child's process group is killed with SIGKILL once it has
// run that long. Throws quill::Error only when the log cannot be opened or fork fails.
ChildResult run_child(const std::vector<std::string>& argv, const std::string& log_path, double timeout_s = 0);

// The path of the running executable (/proc/self/exe resolved), to start another instance of it.
std::string self_executable();

}  // namespace quill
