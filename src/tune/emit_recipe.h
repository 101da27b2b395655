// `quill tune --emit-recipe OUT.yaml`: the chosen layout as a recipe in the seed's format
// (tests/fixtures/recipes/seed.yaml: the layout block and the run block's Megatron flags) that
// `quill run` accepts and maps back to the same layout (recipe/run_recipe.h: recipe_layout_spec and the
// run's flags agreeing with the layout block).
#pragma once

#include <string>

#include "recipe/recipe.h"
#include "tune/rank_layouts.h"

namespace quill::tune {

struct EmitRequest {
  std::string model;          // the recipe's `model` ("Inkling-Small")
  std::string gpu = "H200";   // gpu.type
  int64_t gpu_memory_gb = 141;
  int gpus_per_node = 8;
  int64_t row_tokens = 0, global_batch = 0;
};

// The recipe: status "proposed", the layout block (label, summary with the projected figures, the split
// as layer_split first/last, offload, recompute), the run block `quill run` reads (the layout's flags, the seed's
// optimizer and schedule, which the notes say to review) and the projected figures in the notes (not in
// `result`: nothing is measured yet).
Recipe tuned_recipe(const RankedLayout& chosen, const EmitRequest& request);

}  // namespace quill::tune
