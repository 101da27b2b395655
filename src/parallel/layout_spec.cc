#include "parallel/layout_spec.h"

#include <fmt/format.h>

#include "base/error.h"

namespace quill {

std::string LayoutSpec::describe() const {
  std::string split;
  for (int64_t n : pp_layers) split += (split.empty() ? "" : "/") + std::to_string(n);
  return fmt::format("tp {}{} cp {} dp {} pp {}{} ep {} etp {}", tp, sequence_parallel ? " sp" : "", cp, dp, pp,
                     split.empty() ? "" : " (" + split + ")", ep, etp);
}

std::vector<std::string> check_layout_flags(LayoutSpec& spec) {
  for (auto [flag, v] : {std::pair{"--dp", spec.dp}, {"--tensor-model-parallel-size", spec.tp},
                         {"--pipeline-model-parallel-size", spec.pp}, {"--context-parallel-size", spec.cp},
                         {"--expert-model-parallel-size", spec.ep}, {"--expert-tensor-parallel-size", spec.etp}})
    QUILL_CHECK(v >= 1, "{} must be at least 1, got {}", flag, v);
  if (!spec.pp_layers.empty()) {
    QUILL_CHECK(static_cast<int>(spec.pp_layers.size()) == spec.pp,
                "--pp-layers names {} stages, but --pipeline-model-parallel-size is {}", spec.pp_layers.size(), spec.pp);
    for (size_t s = 0; s < spec.pp_layers.size(); ++s)
      QUILL_CHECK(spec.pp_layers[s] >= 1, "--pp-layers: stage {} has {} layers; every stage needs at least one", s,
                  spec.pp_layers[s]);
  }
  std::vector<std::string> notes;
  if (spec.sequence_parallel && spec.tp == 1) {
    spec.sequence_parallel = false;
    notes.push_back("--sequence-parallel with --tensor-model-parallel-size 1 has no effect; it is off (as Megatron does)");
  }
  return notes;
}

}  // namespace quill
