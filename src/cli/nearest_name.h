// The nearest of a command's known names to a mistyped one, for the one-line "did you mean" of an
// unknown flag or command (cli/unknown_argument.h).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace quill::cli {

// Edits that turn `a` into `b`: insertions, deletions, substitutions and swaps of two neighbouring
// characters, each counting 1 (a swap is the commonest typo: --trian-iters).
size_t edit_distance(std::string_view a, std::string_view b);

// The candidate nearest to `name` (the first of equals), or nothing when even the nearest needs more
// edits than a typo would (a third of the name's length, at least 2): a far guess misleads more than none.
std::optional<std::string> nearest_name(std::string_view name, const std::vector<std::string>& candidates);

}  // namespace quill::cli
