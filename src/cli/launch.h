// Starting a training job on a device ("cpu" or "cuda") under a layout, one process per rank
// (mpirun/srun start them; a one-rank layout without a launcher is one plain process).
#pragma once

#include <string>

#include "cli/memory_flags.h"
#include "parallel/layout_spec.h"
#include "plan/comm_model.h"
#include "train/trainer.h"

namespace quill::cli {

// Before anything is loaded, the layout's memory plan (plan/) is checked against the device's memory
// (`check`): a layout that cannot fit is refused, naming its largest categories and what would fit.
// With `count_collectives`, every collective of a parallel run (or of a simulated rank) is counted per
// step, group and operation into OUT/collectives.json (cli/collectives_file.h). With
// options.simulate_rank R the layout's world rank R runs alone in this process, over a loopback world
// (comm/loopback_comm.h; docs/simulate-rank.md); with options.simulate_comm_time its collectives take
// `standin_model`'s time on stand-in queues (comm/timed_comm.h; the projection's model: pass the same).
TrainResult train_with_layout(const TrainOptions& options, const std::string& device, const LayoutSpec& flags,
                              const MemoryCheck& check = {}, bool count_collectives = false,
                              const plan::CommModelParams& standin_model = plan::h200_comm_params());
// "cuda" when this build has the CUDA backend and a GPU is visible, else "cpu".
std::string default_device();
// What ran the job, for reports: the GPU's name, or the CPU backend.
std::string device_description(const std::string& device);

}  // namespace quill::cli
