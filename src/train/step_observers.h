// The trainer's step observers (train/step_observer.h), one per optional concern.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/step_mark.h"
#include "model/config.h"
#include "model/params.h"
#include "ops/device_context.h"
#include "parallel/layout.h"
#include "train/step_observer.h"
#include "train/train_options.h"

namespace quill {

// The device probe (TrainOptions::make_probe): per-step peak memory into the metrics, and the per-op
// table of `profile_step` written after that step's time was taken.
std::unique_ptr<StepObserver> probe_observer(StepProbe& probe, int64_t profile_step, const std::string& out_dir,
                                             int rank, bool lead);
// The job's step mark (TrainOptions::step_mark): moved at each step's beginning and end, so that a
// collective that times out names its step.
std::unique_ptr<StepObserver> step_mark_observer(StepMark& mark);
// --dump-grads-step K: step K's gradients before clipping to OUT/grads_stepK.safetensors (checkpoint names
// and layout); under data and expert parallelism every rank's summed slices gathered onto the lead, which
// writes them (collective).
std::unique_ptr<StepObserver> gradient_dump_observer(int64_t step, const std::string& out_dir, const ParamTable& params,
                                                     const DeviceContext& ctx, const Layout& layout,
                                                     const InklingConfig& config, bool lead);

}  // namespace quill
