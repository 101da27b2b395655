#include "base/stop_signal.h"

#include <csignal>
#include <cstdio>

namespace quill {

namespace {

// The one global of quill: a signal handler can tell the program only through a variable of static
// storage, and a volatile sig_atomic_t is the only type it may write (C++ [support.signal]). It holds
// the first stop signal's number, 0 before one.
volatile sig_atomic_t g_stop_signal = 0;

void on_stop_signal(int signal) {
  if (g_stop_signal == 0) {
    g_stop_signal = signal;
    return;
  }
  // The second: die by it at once (the default action, so that the parent sees the signal). It is
  // blocked while this handler runs and delivered as the handler returns.
  std::signal(signal, SIG_DFL);
  std::raise(signal);
}

}  // namespace

StopSignals::StopSignals() {
  g_stop_signal = 0;
  struct sigaction action = {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // a write or read the signal interrupts goes on
  sigaction(SIGTERM, &action, &previous_term_);
  sigaction(SIGINT, &action, &previous_int_);
}

StopSignals::~StopSignals() {
  sigaction(SIGTERM, &previous_term_, nullptr);
  sigaction(SIGINT, &previous_int_, nullptr);
}

int StopSignals::received() { return g_stop_signal; }

const char* stop_signal_name(int signal) {
  if (signal == SIGTERM) return "SIGTERM";
  if (signal == SIGINT) return "SIGINT";
  return "a stop signal";
}

}  // namespace quill
