// The optional concerns of a training step behind one interface (issue 41): the device probe (peak
// memory per step, the per-op table of one step), the step mark that collectives' timeouts name, and
// the gradient dump. The trainer calls every observer at the same points of each step: the beginnings
// in the order the observers were added, the ends in the reverse order (the last to begin ends first),
// so that a bracket opened inside another closes inside it.
#pragma once

#include <cstdint>

namespace quill {

struct StepMetrics;

class StepObserver {
 public:
  virtual ~StepObserver() = default;
  virtual void step_begins(int64_t step) { (void)step; }
  // After every micro-batch's forward and backward and the gradients' settling, before the loss and the
  // expert counts are summed over the world.
  virtual void passes_done(int64_t step) { (void)step; }
  // The loss is known and the gradients are final; the optimizer has not changed anything yet.
  virtual void gradients_final(int64_t step) { (void)step; }
  // After the optimizer step; may fill the step's metrics (its peak memory).
  virtual void step_ends(int64_t step, StepMetrics& metrics) { (void)step, (void)metrics; }
  // After the step's time was taken: work that must not count in it (the per-op report).
  virtual void step_timed(int64_t step) { (void)step; }
};

}  // namespace quill
