// LayoutSpec: the sizes of a parallel layout as a user gives them (flags of `quill train`, a recipe's
// `layout`), before any process or communicator exists. Layout (parallel/layout.h) validates it
// against the world and the model and builds the communicators; Grid does the rank arithmetic.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace quill {

struct LayoutSpec {
  int tp = 1, cp = 1, dp = 1, pp = 1;  // dense layers
  int ep = 1, etp = 1;                 // expert layers (Megatron defaults etp to tp; here it is explicit)
  std::string order = "tp-cp-ep-dp-pp";
  bool sequence_parallel = false;
  // Layers per pipeline stage (empty: Megatron's even split, parallel/stage_split.h).
  std::vector<int64_t> pp_layers;

  int world() const { return tp * cp * dp * pp; }
  bool single() const { return world() == 1 && ep == 1 && etp == 1; }
  std::string describe() const;  // "tp 4 sp cp 1 dp 2 pp 4 (12/10/10/10) ep 8 etp 1"
};

// Checks the sizes as flags (each at least 1, --pp-layers one count per stage, each at least 1) and
// throws naming the flag. Returns notes for what is accepted but has no effect (Megatron's rule:
// --sequence-parallel with one tensor-parallel rank is switched off with a warning).
std::vector<std::string> check_layout_flags(LayoutSpec& spec);

}  // namespace quill
