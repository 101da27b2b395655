// Layers per pipeline stage (a recipe's `layer_split`, Megatron's flags): the
// first and last stages take `first` and `last` layers (Megatron's decoder-first/last-pipeline-
// num-layers); the remaining layers are spread evenly over the other stages. A missing first or
// last takes the even share of what the given one leaves, as Megatron does.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace quill {

struct StageSplit {
  std::vector<int64_t> layers;  // per stage; empty when `error` is set
  std::string error;            // why the split does not work
};

StageSplit split_layers(int64_t num_layers, int64_t pp, std::optional<int64_t> first, std::optional<int64_t> last);

}  // namespace quill
