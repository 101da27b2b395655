// SIGTERM and SIGINT as a request to stop, not an order to die: Slurm sends SIGTERM before it kills a
// job at its time limit or on preemption, and a user's Ctrl-C is SIGINT. While a StopSignals lives, the
// first of either signal only records itself (received() returns its number); the training loop stops
// every rank at its next step boundary and saves (train/trainer.h). A second signal ends the process at
// once, by that signal: a checkpoint being written then is left to the atomic swap (io/dir_swap.h),
// which always leaves the previous complete one. Megatron's --exit-signal-handler does the first part
// for SIGTERM when asked; quill does it always.
#pragma once

#include <csignal>

namespace quill {

class StopSignals {
 public:
  // Installs the handler for SIGTERM and SIGINT and forgets any signal recorded before.
  StopSignals();
  // Restores the handlers that were there before.
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // The number of the first stop signal received (SIGTERM, SIGINT), or 0.
  static int received();

 private:
  struct sigaction previous_term_ = {}, previous_int_ = {};
};

// "SIGTERM", "SIGINT", else "signal N".
const char* stop_signal_name(int signal);

}  // namespace quill
