// `quill tune --emit-recipe OUT.yaml`: the chosen layout as a recipe in the seed's format
// (tests/fixtures/recipes/seed.yaml: the layout block and the run block's Megatron flags) that
// `quill run` accepts and maps back to the same layout (recipe/run_recipe.h: recipe_layout_spec and the
// run's flags agreeing with the layout block).
#pragma once

#include <string>

#include "recipe/recipe.h"
#include "tune/rank_layouts.h"

namespace quill::tune {

// How the recipe's run block starts its ranks: an sbatch script whose `srun` runs one rank per GPU under
// PMIx (Slurm), or `mpirun` with one process per GPU (docs/multi-node.md).
enum class Launcher { Slurm, Mpirun };
// "srun" | "mpirun"; anything else is refused naming the flag.
Launcher parse_launcher(const std::string& flag, const std::string& name);

struct EmitRequest {
  std::string model;          // the recipe's `model` ("Inkling-Small")
  std::string gpu = "H200";   // gpu.type
  int64_t gpu_memory_gb = 141;
  int gpus_per_node = 8;
  int64_t row_tokens = 0, global_batch = 0;
  Launcher launcher = Launcher::Slurm;
  std::string recipe_path = "tuned.yaml";  // where the recipe is written: its job line runs `quill run` of it
};

// The run block's launch: for Slurm, `directives` are the #SBATCH lines (nodes, one task per GPU, SIGTERM 300 s
// before the time limit so that quill saves at the step boundary, requeue) and `command` is `srun --mpi=pmix
// --kill-on-bad-exit=1 -- \`; for mpirun no directives and `mpirun -np W --map-by ppr:G:node -x
// NCCL_NVLS_ENABLE -- \`. The trainer's command follows `command` on the next line (the recipe reader takes the
// command after a launcher's bare `--`).
struct LaunchLines {
  std::string directives, command;
};
LaunchLines launch_lines(Launcher launcher, int world, int gpus_per_node);

// The recipe: status "proposed", the layout block (label, summary with the projected figures, the split
// as layer_split first/last, offload, recompute), the run block `quill run` reads (the launcher, the layout's flags, the seed's
// optimizer and schedule, which the notes say to review) and the projected figures in the notes (not in
// `result`: nothing is measured yet).
Recipe tuned_recipe(const RankedLayout& chosen, const EmitRequest& request);

}  // namespace quill::tune
