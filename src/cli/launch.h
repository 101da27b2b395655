// Starting a training job on a device ("cpu" or "cuda") with `dp` data-parallel ranks, one
// process per rank (mpirun/srun start them; dp 1 without a launcher is one plain process).
#pragma once

#include <string>

#include "train/trainer.h"

namespace quill::cli {

TrainResult train_with_layout(const TrainOptions& options, const std::string& device, int dp);
// "cuda" when this build has the CUDA backend and a GPU is visible, else "cpu".
std::string default_device();
// What ran the job, for reports: the GPU's name, or the CPU backend.
std::string device_description(const std::string& device);

}  // namespace quill::cli
