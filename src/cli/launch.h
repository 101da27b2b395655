// Starting a training job on a device ("cpu" or "cuda") under a layout, one process per rank
// (mpirun/srun start them; a one-rank layout without a launcher is one plain process).
#pragma once

#include <string>

#include "cli/memory_flags.h"
#include "parallel/layout_spec.h"
#include "train/trainer.h"

namespace quill::cli {

// Before anything is loaded, the layout's memory plan (plan/) is checked against the device's memory
// (`check`): a layout that cannot fit is refused, naming its largest categories and what would fit.
TrainResult train_with_layout(const TrainOptions& options, const std::string& device, const LayoutSpec& flags,
                              const MemoryCheck& check = {});
// "cuda" when this build has the CUDA backend and a GPU is visible, else "cpu".
std::string default_device();
// What ran the job, for reports: the GPU's name, or the CPU backend.
std::string device_description(const std::string& device);

}  // namespace quill::cli
