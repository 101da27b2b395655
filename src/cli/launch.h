// Starting a training job on a device ("cpu" or "cuda") under a layout, one process per rank
// (mpirun/srun start them; a one-rank layout without a launcher is one plain process).
#pragma once

#include <string>

#include "parallel/layout_spec.h"
#include "train/trainer.h"

namespace quill::cli {

TrainResult train_with_layout(const TrainOptions& options, const std::string& device, const LayoutSpec& flags);
// "cuda" when this build has the CUDA backend and a GPU is visible, else "cpu".
std::string default_device();
// What ran the job, for reports: the GPU's name, or the CPU backend.
std::string device_description(const std::string& device);

}  // namespace quill::cli
