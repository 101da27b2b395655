// Expert load as a user watches it (issue 45): the worst MoE layer's max/mean tokens per expert for the
// step's log line, and a warning when an expert has received no token for a number of steps in a row
// (a router that stopped using experts trains a smaller model than the user thinks).
// Counts are StepMetrics::expert_tokens: per MoE layer in model order, per expert, over the world.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace quill {

struct ExpertImbalance {
  int64_t layer = -1;  // the model's layer index (-1: no MoE layer, or no token routed)
  double max_over_mean = 0;
};
// The MoE layer whose busiest expert is furthest above the layer's mean; `moe_layers` maps the counts'
// index to the model's layer index.
ExpertImbalance worst_imbalance(const std::vector<std::vector<int64_t>>& tokens, const std::vector<int64_t>& moe_layers);

// Tracks each (layer, expert)'s run of steps without a token. observe() returns one warning per layer whose
// experts reached `idle_steps` in a row at this step (each run is reported once, when it reaches the limit;
// an expert that gets tokens again starts over). idle_steps <= 0: never warns.
class IdleExpertWatch {
 public:
  IdleExpertWatch(std::vector<int64_t> moe_layers, int64_t idle_steps);
  std::vector<std::string> observe(int64_t step, const std::vector<std::vector<int64_t>>& tokens);

 private:
  std::vector<int64_t> moe_layers_;
  int64_t idle_steps_;
  std::vector<std::vector<int64_t>> idle_;  // [layer][expert]: steps in a row without a token
};

}  // namespace quill
