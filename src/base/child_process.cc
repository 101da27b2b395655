#include "base/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include "base/error.h"
#include "base/timer.h"

namespace quill {

std::string ChildResult::describe() const {
  if (!started) return "could not be executed (exit status 127)";
  if (timed_out) return fmt::format("timed out after {:.0f} s (killed)", seconds);
  if (signal != 0) return fmt::format("killed by signal {} ({})", signal, strsignal(signal));
  return fmt::format("exit status {}", exit_code);
}

ChildResult run_child(const std::vector<std::string>& argv, const std::string& log_path, double timeout_s) {
  QUILL_CHECK(!argv.empty(), "run_child: no program given");
  const int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  QUILL_CHECK(log >= 0, "{}: cannot open the log for writing: {}", log_path, std::strerror(errno));
  // Everything the child needs is built before fork: after it only async-signal-safe calls.
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const Timer timer;
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    ::close(log);
    QUILL_FAIL("run_child {}: fork failed: {}", argv[0], std::strerror(err));
  }
  if (pid == 0) {
    ::setpgid(0, 0);  // its own group: a time limit ends it and whatever it started
    const int in = ::open("/dev/null", O_RDONLY);
    if (in >= 0) ::dup2(in, STDIN_FILENO);
    ::dup2(log, STDOUT_FILENO);
    ::dup2(log, STDERR_FILENO);
    ::execv(args[0], args.data());
    static const char msg[] = "run_child: execv failed\n";
    [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, msg, sizeof msg - 1);
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also here: whichever runs first, the group exists before a kill
  ::close(log);
  ChildResult r;
  int status = 0;
  while (true) {
    const pid_t w = ::waitpid(pid, &status, timeout_s > 0 ? WNOHANG : 0);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) QUILL_FAIL("run_child {}: waitpid failed: {}", argv[0], std::strerror(errno));
    if (timeout_s > 0 && timer.seconds() > timeout_s && !r.timed_out) {
      r.timed_out = true;
      ::kill(-pid, SIGKILL);
    }
    if (w == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  r.seconds = timer.seconds();
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  r.started = !(r.exit_code == 127 && r.signal == 0);
  return r;
}

std::string self_executable() {
  std::error_code ec;
  const std::filesystem::path p = std::filesystem::read_symlink("/proc/self/exe", ec);
  QUILL_CHECK(!ec, "/proc/self/exe: cannot resolve the running executable: {}", ec.message());
  return p.string();
}

}  // namespace quill
