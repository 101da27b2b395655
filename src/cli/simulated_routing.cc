#include "cli/simulated_routing.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/file_util.h"
#include "comm/loopback_routing.h"
#include "parallel/grid.h"
#include "parallel/layout.h"

namespace quill::cli {

std::shared_ptr<LoopbackRouting> simulated_routing(const std::string& flag, const InklingConfig& config,
                                                   const LayoutSpec& spec, int rank, int64_t global_batch,
                                                   int64_t row_tokens) {
  if (flag == "balanced") return balanced_routing();
  QUILL_CHECK(path_exists(flag), "--simulate-routing {}: neither balanced nor a metrics.jsonl file", flag);
  // The model's MoE layers, and those of the simulated rank's stage (their index among the MoE layers).
  const std::vector<int64_t> stages = resolve_stage_layers(spec, config.num_layers);
  const int stage = Grid(spec.world(), spec).coords(rank).pp;
  int64_t first = 0;
  for (int s = 0; s < stage; ++s) first += stages[static_cast<size_t>(s)];
  const int64_t end = first + stages[static_cast<size_t>(stage)];
  std::vector<size_t> mine;
  size_t moe = 0;
  for (int64_t i = 0; i < config.num_layers; ++i) {
    if (!config.is_moe(i)) continue;
    if (i >= first && i < end) mine.push_back(moe);
    ++moe;
  }
  RecordedRouting r;
  r.micro_batches = global_batch / spec.dp;
  std::ifstream in(flag);
  std::string text;
  int64_t line_no = 0, file_tokens = 0;
  while (std::getline(in, text)) {
    ++line_no;
    if (text.empty()) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception&) {
      QUILL_FAIL("--simulate-routing {}: line {} is not JSON", flag, line_no);
    }
    QUILL_CHECK(j.contains("expert_tokens") && j.contains("tokens"),
                "--simulate-routing {}: line {} has no expert_tokens or tokens (a metrics.jsonl of quill train)", flag,
                line_no);
    const auto all = j.at("expert_tokens").get<std::vector<std::vector<int64_t>>>();
    QUILL_CHECK(all.size() == moe, "--simulate-routing {}: line {}: expert_tokens has {} MoE layers, the model {}", flag,
                line_no, all.size(), moe);
    std::vector<std::vector<int64_t>> step;
    for (size_t l : mine) {
      QUILL_CHECK(static_cast<int64_t>(all[l].size()) == config.n_routed_experts,
                  "--simulate-routing {}: line {}: MoE layer {} has {} experts, the model {}", flag, line_no, l,
                  all[l].size(), config.n_routed_experts);
      step.push_back(all[l]);
    }
    if (file_tokens == 0) file_tokens = j.at("tokens");
    r.counts.push_back(std::move(step));
  }
  QUILL_CHECK(!r.counts.empty(), "--simulate-routing {}: no steps", flag);
  if (mine.empty()) return balanced_routing();  // a stage without MoE layers exchanges no tokens
  QUILL_CHECK(file_tokens > 0, "--simulate-routing {}: line 1: tokens is {}", flag, file_tokens);
  r.scale_num = global_batch * row_tokens;
  r.scale_den = file_tokens * Grid(spec.world(), spec).edp();
  return recorded_routing(std::move(r));
}

}  // namespace quill::cli
