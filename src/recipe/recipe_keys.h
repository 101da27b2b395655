// Keys of a recipe document that the typed model (recipe.h) does not know. Reading keeps them (a
// write round-trips them), but a misspelt key would otherwise be ignored silently: `layuot:` would
// leave the default layout in force. Validation reports each as a problem naming its path and the
// nearest known key. Free-form sections (env, stack, patches, correctness.component_tests) take any key.
#pragma once

#include <string>
#include <vector>

#include "recipe/recipe.h"

namespace quill {

struct UnknownKey {
  std::string path;     // "layout.tpp"
  std::string nearest;  // the known key of that section closest in spelling ("tp")
};

// The unknown keys of recipe.doc, in document order (none for a recipe built from scratch).
std::vector<UnknownKey> unknown_recipe_keys(const Recipe& recipe);

// Levenshtein distance (insertions, deletions, substitutions), for "did you mean".
size_t edit_distance(const std::string& a, const std::string& b);

}  // namespace quill
