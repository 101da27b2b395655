#include "parallel/layout_spec.h"

#include <fmt/format.h>

namespace quill {

std::string LayoutSpec::describe() const {
  std::string split;
  for (int64_t n : pp_layers) split += (split.empty() ? "" : "/") + std::to_string(n);
  return fmt::format("tp {}{} cp {} dp {} pp {}{} ep {} etp {}", tp, sequence_parallel ? " sp" : "", cp, dp, pp,
                     split.empty() ? "" : " (" + split + ")", ep, etp);
}

}  // namespace quill
