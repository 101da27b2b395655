#include "cli/tune_report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <vector>

namespace quill::cli {

std::string gib_text(int64_t bytes) { return fmt::format("{:.1f}", static_cast<double>(bytes) / (1 << 30)); }

namespace {

// Peak GiB by stage role: "first 120.1 / middle 98.0 / last 110.3" (the largest middle stage).
std::string peaks_by_role(const tune::Candidate& c) {
  std::map<std::string, int64_t> by;
  std::vector<std::string> order;
  for (size_t i = 0; i < c.stage_roles.size(); ++i) {
    if (!by.count(c.stage_roles[i])) order.push_back(c.stage_roles[i]);
    by[c.stage_roles[i]] = std::max(by[c.stage_roles[i]], c.stage_device_bytes[i]);
  }
  std::vector<std::string> parts;
  for (const std::string& role : order) parts.push_back(role + " " + gib_text(by[role]));
  return fmt::format("{}", fmt::join(parts, " / "));
}

std::string stage_list(const tune::RankedLayout& r, const std::string& source) {
  std::vector<size_t> stages;
  for (size_t s = 0; s < r.compute_sources.size(); ++s)
    if (r.compute_sources[s].source == source) stages.push_back(s);
  return fmt::format("{}", fmt::join(stages, ","));
}

}  // namespace

std::string optimizer_text(const OptimizerMemory& m) {
  std::string s = m.effective_fraction() > 0 ? fmt::format("offload {:.1f}", m.offload_fraction) : "offload 0";
  if (m.exp_avg == DType::BF16) s += ", bf16 moments";
  return s;
}

std::string recompute_text(const RecomputeOptions& r) {
  if (r.selective()) return "selective";
  return r.active() ? fmt::format("{} {}", tune::recompute_method_name(r), r.num_layers) : "none";
}

std::string memory_settings_text(const tune::Candidate& c) {
  const std::string o = optimizer_text(c.optimizer);
  return c.recompute.active() || c.recompute.selective() ? o + ", recompute " + recompute_text(c.recompute) : o;
}

std::string compute_source_text(const tune::RankedLayout& r) {
  if (!r.measured()) return "modelled";
  const std::string measured = stage_list(r, "measured"), scaled = stage_list(r, "scaled"),
                    modelled = stage_list(r, "modelled");
  std::string out = "measured (stage" + std::string(measured.find(',') == std::string::npos ? " " : "s ") + measured;
  if (!scaled.empty()) out += "; " + scaled + " scaled";
  if (!modelled.empty()) out += "; " + modelled + " modelled";
  return out + ")";
}

std::string ranked_header(bool compute_column) {
  return fmt::format("{:>4}  {:<44} {:<22} {:<10} {:<36} {}{:>8} {:>10} {:>7} {:>8} {}\n", "rank", "layout",
                     "optimizer", "recompute", "peak GiB by stage (plan)",
                     compute_column ? fmt::format("{:<34} ", "compute") : "", "step s", "tok/s/GPU", "MFU", "$/M tok",
                     "bounded by");
}

std::string ranked_row(const tune::RankedLayout& r, int rank, bool compute_column) {
  return fmt::format("{:>4}  {:<44} {:<22} {:<10} {:<36} {}{:>8.3f} {:>10.1f} {:>6.2f}% {:>8} {}\n", rank,
                     r.candidate.layout.describe(), optimizer_text(r.candidate.optimizer),
                     recompute_text(r.candidate.recompute), peaks_by_role(r.candidate),
                     compute_column ? fmt::format("{:<34} ", compute_source_text(r)) : "", r.step_s,
                     r.tokens_per_s_per_gpu, 100 * r.mfu,
                     r.usd_per_million_tokens ? fmt::format("{:.3f}", *r.usd_per_million_tokens) : "-",
                     fmt::format("{} {:.3f} s", r.bound, r.bound_s));
}

nlohmann::json ranked_json(const tune::RankedLayout& r, int rank) {
  nlohmann::json j;
  j["rank"] = rank;
  j["layout"] = r.candidate.layout.describe();
  j["tp"] = r.candidate.layout.tp, j["sp"] = r.candidate.layout.sequence_parallel, j["pp"] = r.candidate.layout.pp;
  j["pp_layers"] = r.candidate.layout.pp_layers, j["ep"] = r.candidate.layout.ep, j["dp"] = r.candidate.layout.dp;
  j["split"] = r.candidate.split;
  j["offload_fraction"] = r.candidate.optimizer.effective_fraction();
  j["bf16_moments"] = r.candidate.optimizer.exp_avg == DType::BF16;
  j["recompute"] = r.candidate.recompute.describe();
  j["compute_source"] = r.measured() ? "measured" : "modelled";
  j["compute"] = compute_source_text(r);
  j["comm_source"] = "modelled";
  nlohmann::json stages = nlohmann::json::array();
  for (size_t i = 0; i < r.candidate.stage_roles.size(); ++i) {
    const tune::StageComputeSource& c = r.compute_sources[i];
    nlohmann::json s = {{"role", r.candidate.stage_roles[i]},
                        {"peak_device_bytes", r.candidate.stage_device_bytes[i]},
                        {"forward_s", r.projection.stages[i].forward_s},
                        {"backward_s", r.projection.stages[i].backward_s},
                        {"optimizer_s", r.projection.stages[i].optimizer_compute_s + r.projection.stages[i].optimizer_comm_s},
                        {"source", c.source},
                        {"compute_per_micro_batch_s", c.passes_per_micro_batch_s},
                        {"optimizer_compute_s", c.optimizer_s},
                        {"modelled_compute_per_micro_batch_s", c.modelled_passes_per_micro_batch_s},
                        {"modelled_optimizer_compute_s", c.modelled_optimizer_s},
                        {"comm_source", "modelled"}};
    if (i < r.candidate.stage_allocator_peak_bytes.size())
      s["plan_allocator_peak_bytes"] = r.candidate.stage_allocator_peak_bytes[i];
    if (c.source != "modelled") s["from_stage"] = c.from_stage;
    stages.push_back(s);
  }
  j["stages"] = stages;
  j["step_s"] = r.step_s;
  j["pipeline_s"] = r.projection.pipeline_s;
  j["optimizer_s"] = r.projection.optimizer_s;
  j["exposed_comm_s"] = r.projection.exposed_comm_s;
  j["bubble_s"] = r.projection.bubble_s;
  j["tokens_per_s_per_gpu"] = r.tokens_per_s_per_gpu;
  j["mfu"] = r.mfu;
  j["usd_per_million_tokens"] = r.usd_per_million_tokens ? nlohmann::json(*r.usd_per_million_tokens) : nlohmann::json(nullptr);
  j["bound"] = r.bound;
  j["bound_s"] = r.bound_s;
  return j;
}

}  // namespace quill::cli
