// Recipe validation (recipes-and-measurement.md §1-2): the problems that make a recipe unusable,
// each naming its field, and the fuller check behind `quill recipe validate`, which also reads the
// run's flags and reports (as warnings) the flags it does not understand, the values it cannot
// resolve and where the flags disagree with the layout.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "recipe/recipe.h"
#include "recipe/run_definition.h"
#include "recipe/run_flags.h"

namespace quill {

struct Problem {
  std::string field;    // "layout.dp"
  std::string message;
  std::string text() const { return field + ": " + message; }
};

struct ValidateOptions {
  std::optional<int64_t> num_layers;  // the model's decoder layers, when known
  std::optional<int64_t> run_steps;   // optimizer steps of the run, when result.steps_per_run is absent
};

// Problems of the recipe's own fields: no unknown key (recipe_keys.h); schema_version 1; world tp*pp*cp*dp == gpu.count; ep*etp
// divides tp*cp*dp; the layer split adds up (when the layer count is known); a known precision;
// global_batch a multiple of dp*rows_per_microbatch; the window inside the run's steps.
std::vector<Problem> validate_recipe(const Recipe& recipe, const ValidateOptions& options = {});

// Decoder layers of a model named in recipes ("Inkling-Small": 42), or nothing when unknown.
std::optional<int64_t> known_model_layers(std::string_view model);

struct CheckOptions {
  std::optional<int64_t> num_layers;  // overrides known_model_layers(recipe.model)
  VarMap set;                         // --set NAME=VALUE for the run script
  VarMap extra_env;                   // more variables (below the recipe's env), e.g. the caller's environment
};

struct RecipeCheck {
  std::vector<Problem> problems;
  std::vector<std::string> warnings;
  RunFlags flags;
  RunDefinition definition;
  std::vector<Disagreement> disagreements;
  std::optional<int64_t> num_layers;
};

RecipeCheck check_recipe(const Recipe& recipe, const CheckOptions& options = {});

// The recipe's env section and `extra` as one variable map for the run-script reader.
VarMap recipe_variables(const Recipe& recipe, const VarMap& extra = {});

}  // namespace quill
