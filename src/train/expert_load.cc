#include "train/expert_load.h"

#include <fmt/format.h>

#include <fmt/ranges.h>

#include <algorithm>

#include "base/error.h"

namespace quill {

ExpertImbalance worst_imbalance(const std::vector<std::vector<int64_t>>& tokens, const std::vector<int64_t>& moe_layers) {
  QUILL_CHECK(tokens.empty() || tokens.size() == moe_layers.size(), "expert load: counts of {} layers, {} MoE layers",
              tokens.size(), moe_layers.size());
  ExpertImbalance worst;
  for (size_t l = 0; l < tokens.size(); ++l) {
    const std::vector<int64_t>& t = tokens[l];
    int64_t sum = 0, most = 0;
    for (int64_t n : t) sum += n, most = std::max(most, n);
    if (t.empty() || sum == 0) continue;
    const double ratio = static_cast<double>(most) * static_cast<double>(t.size()) / static_cast<double>(sum);
    if (ratio > worst.max_over_mean) worst = ExpertImbalance{moe_layers[l], ratio};
  }
  return worst;
}

IdleExpertWatch::IdleExpertWatch(std::vector<int64_t> moe_layers, int64_t idle_steps)
    : moe_layers_(std::move(moe_layers)), idle_steps_(idle_steps) {}

std::vector<std::string> IdleExpertWatch::observe(int64_t step, const std::vector<std::vector<int64_t>>& tokens) {
  std::vector<std::string> warnings;
  if (idle_steps_ <= 0 || tokens.empty()) return warnings;
  QUILL_CHECK(tokens.size() == moe_layers_.size(), "expert load: counts of {} layers, {} MoE layers", tokens.size(),
              moe_layers_.size());
  if (idle_.empty())
    for (const std::vector<int64_t>& t : tokens) idle_.emplace_back(t.size(), 0);
  for (size_t l = 0; l < tokens.size(); ++l) {
    std::vector<int64_t> reached;
    for (size_t e = 0; e < tokens[l].size(); ++e) {
      idle_[l][e] = tokens[l][e] == 0 ? idle_[l][e] + 1 : 0;
      if (idle_[l][e] == idle_steps_) reached.push_back(static_cast<int64_t>(e));
    }
    if (reached.empty()) continue;
    const int64_t idle_now = std::count_if(idle_[l].begin(), idle_[l].end(), [&](int64_t n) { return n >= idle_steps_; });
    warnings.push_back(fmt::format(
        "step {}: layer {}: expert{} {} received no token for {} steps in a row ({} of the layer's {} experts idle "
        "that long; --moe-idle-expert-warning-steps sets the limit)",
        step + 1, moe_layers_[l], reached.size() == 1 ? "" : "s", fmt::join(reached, ", "), idle_steps_, idle_now,
        tokens[l].size()));
  }
  return warnings;
}

}  // namespace quill
