#include "parallel/stage_split.h"

#include <fmt/format.h>

namespace quill {

StageSplit split_layers(int64_t num_layers, int64_t pp, std::optional<int64_t> first, std::optional<int64_t> last) {
  StageSplit out;
  if (pp < 1) {
    out.error = fmt::format("pp {} is not a pipeline size", pp);
    return out;
  }
  if ((first && *first < 1) || (last && *last < 1)) {
    out.error = fmt::format("stages need at least one layer (first {}, last {})", first ? *first : 0, last ? *last : 0);
    return out;
  }
  if (pp == 1) {
    int64_t only = first.value_or(last.value_or(num_layers));
    if (only != num_layers || (first && last && *first != *last)) {
      out.error = fmt::format("one pipeline stage holds all {} layers, the split says {}", num_layers, only);
      return out;
    }
    out.layers = {num_layers};
    return out;
  }
  // Stages whose count is not given share the rest evenly.
  int64_t given = first.value_or(0) + last.value_or(0);
  int64_t free_stages = pp - (first ? 1 : 0) - (last ? 1 : 0);
  int64_t rest = num_layers - given;
  if (rest < 0 || (free_stages == 0 && rest != 0)) {
    out.error = fmt::format("the split {} + {} does not add up to the model's {} layers over {} stages",
                            first ? fmt::format("{}", *first) : "?", last ? fmt::format("{}", *last) : "?",
                            num_layers, pp);
    return out;
  }
  if (!first && !last && (rest % pp != 0 || rest < pp)) {
    out.error = rest < pp ? fmt::format("the model's {} layers cannot fill {} stages (every stage needs one)", rest, pp)
                          : fmt::format("the model's {} layers do not divide evenly over {} stages", rest, pp);
    return out;
  }
  if (free_stages > 0 && (rest % free_stages != 0 || rest / free_stages < 1)) {
    out.error = fmt::format("the {} layers left after first {} and last {} do not divide evenly over {} stages",
                            rest, first ? fmt::format("{}", *first) : "-", last ? fmt::format("{}", *last) : "-",
                            free_stages);
    return out;
  }
  int64_t share = free_stages > 0 ? rest / free_stages : 0;
  for (int64_t s = 0; s < pp; ++s) {
    if (s == 0 && first) out.layers.push_back(*first);
    else if (s == pp - 1 && last) out.layers.push_back(*last);
    else out.layers.push_back(share);
  }
  return out;
}

}  // namespace quill
