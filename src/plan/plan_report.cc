#include "plan/plan_report.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>

#include <fmt/format.h>

#include "base/error.h"

namespace quill::plan {

std::string format_bytes(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (bytes == 0) return "0";
  if (std::abs(b) < (1 << 30)) return fmt::format("{:.2f} MiB", b / (1 << 20));
  return fmt::format("{:.2f} GiB", b / (1 << 30));
}

namespace {

int64_t use(const StagePlan& s, Use u) { return s.at_peak[static_cast<size_t>(u)]; }

std::string stage_title(const StagePlan& s) {
  return fmt::format("stage {} ({})", s.stage, s.role);
}

std::string layers_text(const StagePlan& s) {
  return fmt::format("{}-{}: {} dense + {} MoE", s.first_layer, s.end_layer - 1, s.dense_layers, s.moe_layers);
}

struct Row {
  std::string label;
  std::function<std::string(const StagePlan&)> cell;
};

std::vector<Row> rows(const MemoryPlan& plan, int64_t device_memory) {
  const bool gpu = plan.request.device == Device::CUDA;
  const auto bytes = [](std::function<int64_t(const StagePlan&)> f) {
    return [f](const StagePlan& s) { return format_bytes(f(s)); };
  };
  std::vector<Row> r = {
      {"layers", layers_text},
      {"parameters held", [](const StagePlan& s) { return fmt::format("{:.3f} G", s.parameters / 1e9); }},
      {gpu ? "compute weights (bf16; fp32 policy tensors)" : "compute weights (fp32)",
       bytes([](const StagePlan& s) { return s.compute_weights; })},
      {"fp32 master weights (device)", bytes([](const StagePlan& s) { return s.master_weights; })},
      {"gradient buffers", bytes([](const StagePlan& s) { return s.gradients; })},
      {"Adam moments (device)", bytes([](const StagePlan& s) { return s.moments; })},
      {"activations of one micro-batch", bytes([](const StagePlan& s) { return s.activations_per_micro_batch; })},
      {"micro-batches in flight (1F1B) / per step",
       [](const StagePlan& s) { return fmt::format("{} / {}", s.in_flight, s.micro_batches); }},
  };
  if (std::any_of(plan.stages.begin(), plan.stages.end(), [](const StagePlan& s) { return s.transient_compute > 0; }))
    r.push_back({"FP8 matrices' bf16 copies (optimizer phase only)",
                 bytes([](const StagePlan& s) { return s.transient_compute; })});
  for (size_t u = 0; u < kUses; ++u) {
    const Use k = static_cast<Use>(u);
    std::string label = std::string(use_name(k)) + " at the peak";
    if (k == Use::Dispatch) label = "MoE dispatch buffers (worst case) at the peak";
    r.push_back({label, bytes([k](const StagePlan& s) { return use(s, k); })});
  }
  r.push_back({"= allocator peak (what the allocator counts)", bytes([](const StagePlan& s) { return s.allocator_peak(); })});
  r.push_back({gpu ? "GEMM workspace (cuBLASLt)" : "GEMM scratch (weight transpose, untracked)",
               bytes([](const StagePlan& s) { return s.gemm_workspace; })});
  if (gpu) {
    r.push_back({"CUDA context (modelled)", bytes([](const StagePlan& s) { return s.cuda_context; })});
    r.push_back({"allocator slack (modelled)", bytes([](const StagePlan& s) { return s.allocator_slack; })});
    r.push_back({"NCCL buffers (modelled)", bytes([](const StagePlan& s) { return s.comm_buffers; })});
  }
  r.push_back({"= device total", bytes([](const StagePlan& s) { return s.device_total(); })});
  if (device_memory > 0)
    r.push_back({fmt::format("fits {}", format_bytes(device_memory)), [device_memory](const StagePlan& s) {
                   return s.device_total() <= device_memory
                              ? fmt::format("yes ({} free)", format_bytes(device_memory - s.device_total()))
                              : fmt::format("NO ({} over)", format_bytes(s.device_total() - device_memory));
                 }});
  r.push_back({"host: offloaded optimizer state (pinned)", bytes([](const StagePlan& s) { return s.host_optimizer; })});
  r.push_back({"host: fp32 weights before placement (startup)", bytes([](const StagePlan& s) { return s.host_weights_at_load; })});
  r.push_back({"= host peak at startup (placement, or placed)", bytes([](const StagePlan& s) { return s.host_startup_peak(); })});
  r.push_back({"host: Hugging Face export buffers (streamed)", bytes([](const StagePlan& s) { return s.host_export; })});
  r.push_back({"= host during the export (pinned + buffers)", bytes([](const StagePlan& s) { return s.host_export_peak(); })});
  return r;
}

}  // namespace

std::string plan_table(const MemoryPlan& plan, int64_t device_memory) {
  const PlanRequest& q = plan.request;
  std::string out = fmt::format(
      "memory plan: {} on {}, {} ranks; {}-token rows, global batch {} ({} micro-batches of one row per rank); {}{}\n",
      q.config.source.empty() ? std::string("model") : q.config.source, q.device == Device::CUDA ? "cuda (bf16)" : "cpu (fp32)",
      q.layout.world(), q.row_tokens, q.global_batch, q.global_batch / q.layout.dp, q.optimizer.describe(),
      q.recompute.active() ? "; recompute " + q.recompute.describe() : std::string());
  out += fmt::format("layout: {}\n", q.layout.describe());
  const std::vector<Row> table = rows(plan, device_memory);
  size_t label_w = 0;
  for (const Row& r : table) label_w = std::max(label_w, r.label.size());
  std::vector<size_t> col_w;
  for (const StagePlan& s : plan.stages) {
    size_t w = stage_title(s).size();
    for (const Row& r : table) w = std::max(w, r.cell(s).size());
    col_w.push_back(w);
  }
  out += fmt::format("{:<{}}", "per GPU", label_w);
  for (size_t i = 0; i < plan.stages.size(); ++i) out += fmt::format("  {:>{}}", stage_title(plan.stages[i]), col_w[i]);
  out += "\n";
  for (const Row& r : table) {
    out += fmt::format("{:<{}}", r.label, label_w);
    for (size_t i = 0; i < plan.stages.size(); ++i) out += fmt::format("  {:>{}}", r.cell(plan.stages[i]), col_w[i]);
    out += "\n";
  }
  out += "pinned host memory per node (" + std::to_string(q.gpus_per_node) + " GPUs):";
  for (size_t n = 0; n < plan.pinned_host_per_node.size(); ++n)
    out += fmt::format("{} node {} {}", n ? "," : "", n, format_bytes(plan.pinned_host_per_node[n]));
  out += "\nhost memory per node at startup (the ranks' peaks):";
  for (size_t n = 0; n < plan.startup_host_per_node.size(); ++n)
    out += fmt::format("{} node {} {}", n ? "," : "", n, format_bytes(plan.startup_host_per_node[n]));
  out += "\nhost memory per node during the Hugging Face export (--save-hf, quill export; streamed, nothing gathered):";
  for (size_t n = 0; n < plan.export_host_per_node.size(); ++n)
    out += fmt::format("{} node {} {}", n ? "," : "", n, format_bytes(plan.export_host_per_node[n]));
  out += "\n";
  for (const std::string& n : plan.notes) out += "note: " + n + "\n";
  return out;
}

nlohmann::json plan_json(const MemoryPlan& plan, int64_t device_memory) {
  const PlanRequest& q = plan.request;
  nlohmann::json j;
  j["config"] = q.config.source;
  j["device"] = q.device == Device::CUDA ? "cuda" : "cpu";
  j["layout"] = q.layout.describe();
  j["world"] = q.layout.world();
  j["row_tokens"] = q.row_tokens;
  j["global_batch"] = q.global_batch;
  j["optimizer"] = q.optimizer.describe();
  j["recompute"] = q.recompute.describe();
  j["device_memory_bytes"] = device_memory;
  j["gpus_per_node"] = q.gpus_per_node;
  j["pinned_host_bytes_per_node"] = plan.pinned_host_per_node;
  j["startup_host_bytes_per_node"] = plan.startup_host_per_node;
  j["export_host_bytes_per_node"] = plan.export_host_per_node;
  j["notes"] = plan.notes;
  nlohmann::json stages = nlohmann::json::array();
  for (const StagePlan& s : plan.stages) {
    nlohmann::json at_peak;
    for (size_t u = 0; u < kUses; ++u) at_peak[use_name(static_cast<Use>(u))] = s.at_peak[u];
    stages.push_back({{"stage", s.stage},
                      {"role", s.role},
                      {"first_layer", s.first_layer},
                      {"end_layer", s.end_layer},
                      {"dense_layers", s.dense_layers},
                      {"moe_layers", s.moe_layers},
                      {"world_rank", s.world_rank},
                      {"parameters", s.parameters},
                      {"compute_weights_bytes", s.compute_weights},
                      {"transient_compute_bytes", s.transient_compute},
                      {"master_weights_bytes", s.master_weights},
                      {"gradient_bytes", s.gradients},
                      {"moment_bytes", s.moments},
                      {"resident_bytes", s.resident()},
                      {"activations_per_micro_batch_bytes", s.activations_per_micro_batch},
                      {"micro_batches", s.micro_batches},
                      {"in_flight", s.in_flight},
                      {"dynamic_at_peak_bytes", at_peak},
                      {"allocator_peak_bytes", s.allocator_peak()},
                      {"gemm_workspace_bytes", s.gemm_workspace},
                      {"cuda_context_bytes", s.cuda_context},
                      {"allocator_slack_bytes", s.allocator_slack},
                      {"comm_buffer_bytes", s.comm_buffers},
                      {"device_total_bytes", s.device_total()},
                      {"host_optimizer_bytes", s.host_optimizer},
                      {"host_weights_at_load_bytes", s.host_weights_at_load},
                      {"host_startup_peak_bytes", s.host_startup_peak()},
                      {"host_export_bytes", s.host_export},
                      {"host_export_peak_bytes", s.host_export_peak()},
                      {"fits", device_memory <= 0 || s.device_total() <= device_memory}});
  }
  j["stages"] = stages;
  j["fits"] = device_memory <= 0 || plan.largest().device_total() <= device_memory;
  return j;
}

namespace {

// The largest device total of `request` planned again, or nothing when that layout does not work.
std::optional<int64_t> replanned(const PlanRequest& request) {
  try {
    return plan_memory(request).largest().device_total();
  } catch (const Error&) {
    return std::nullopt;
  }
}

std::string verdict(std::optional<int64_t> total, int64_t device_memory) {
  return fmt::format("{} ({})", *total <= device_memory ? "fits" : "does not fit", format_bytes(*total));
}

}  // namespace

FitVerdict check_host_fit(const MemoryPlan& plan, const std::vector<int>& ranks, int64_t host_memory) {
  FitVerdict v;
  int64_t placing = 0, placed = 0, total = 0;  // during placement, once placed, the ranks' peaks
  for (int r : ranks) {
    if (r < 0 || static_cast<size_t>(r) >= plan.stage_of_rank.size()) continue;
    const StagePlan& s = plan.stages[static_cast<size_t>(plan.stage_of_rank[static_cast<size_t>(r)])];
    placing += s.host_weights_at_load + s.host_masters;
    placed += s.host_optimizer;
    total += s.host_startup_peak();
  }
  const auto limit = static_cast<int64_t>(kHostShare * static_cast<double>(host_memory));
  if (host_memory <= 0 || total <= limit) return v;
  v.fits = false;
  const double fraction = plan.request.optimizer.effective_fraction();
  const std::string fixes =
      fraction > 0 ? fmt::format("lower --optimizer-offload-fraction (now {:.2f}), use bf16 moments (--exp-avg-dtype bf16 "
                                 "--exp-avg-sq-dtype bf16), or spread the layout over more nodes", fraction)
                   : "shard the model over more ranks (--tp, --pp, --ep) or place fewer ranks on a node";
  v.message = fmt::format(
      "the layout does not fit this node's host memory at startup: its {} rank{} need{} up to {} (during placement the "
      "fp32 copy of their weights and the offloaded masters, {}; once placed the pinned optimizer state, {}), more "
      "than {:.0f}% of the node's {} ({}); {}",
      ranks.size(), ranks.size() == 1 ? "" : "s", ranks.size() == 1 ? "s" : "", format_bytes(total), format_bytes(placing),
      format_bytes(placed), 100 * kHostShare, format_bytes(host_memory), format_bytes(limit), fixes);
  return v;
}

std::vector<FitVerdict> check_nodes_host_fit(const MemoryPlan& plan, int64_t host_memory) {
  const int per_node = plan.request.gpus_per_node, world = static_cast<int>(plan.stage_of_rank.size());
  std::vector<FitVerdict> out;
  for (int first = 0; first < world; first += per_node) {
    std::vector<int> ranks;
    for (int r = first; r < std::min(world, first + per_node); ++r) ranks.push_back(r);
    out.push_back(check_host_fit(plan, ranks, host_memory));
  }
  return out;
}

FitVerdict check_fit(const MemoryPlan& plan, int64_t device_memory) {
  FitVerdict v;
  if (device_memory <= 0) return v;
  const StagePlan& worst = plan.largest();
  if (worst.device_total() <= device_memory) return v;
  v.fits = false;
  const PlanRequest& q = plan.request;
  std::vector<std::pair<std::string, int64_t>> parts = {
      {"compute weights", worst.compute_weights},
      {"fp32 master weights", worst.master_weights},
      {"gradient buffers", worst.gradients},
      {"Adam moments", worst.moments},
  };
  for (size_t u = 0; u < kUses; ++u) parts.emplace_back(use_name(static_cast<Use>(u)), worst.at_peak[u]);
  std::sort(parts.begin(), parts.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  std::string largest;
  for (size_t i = 0; i < 3 && i < parts.size(); ++i)
    largest += fmt::format("{}{} {}", i ? ", " : "", parts[i].first, format_bytes(parts[i].second));
  v.message = fmt::format(
      "the layout does not fit the device's memory: stage {} ({}; layers {}) needs {} per device, the device has {} (largest: {}; "
      "activations of one micro-batch {}, {} in flight)",
      worst.stage, worst.role, layers_text(worst), format_bytes(worst.device_total()), format_bytes(device_memory), largest,
      format_bytes(worst.activations_per_micro_batch), worst.in_flight);
  std::vector<std::string> fixes;
  // The offload fraction: the smallest (in steps of 0.05) that fits, with the moments as they are
  // and with bf16 moments.
  for (bool bf16 : {false, true}) {
    PlanRequest r = q;
    if (bf16) {
      if (q.optimizer.exp_avg == DType::BF16 && q.optimizer.exp_avg_sq == DType::BF16) continue;
      r.optimizer.exp_avg = r.optimizer.exp_avg_sq = DType::BF16;
      const std::optional<int64_t> alone = replanned(r);
      if (alone) fixes.push_back(fmt::format("--exp-avg-dtype bf16 --exp-avg-sq-dtype bf16: {}", verdict(alone, device_memory)));
    }
    std::optional<std::pair<double, int64_t>> found;
    for (int step = 1; step <= 20 && !found; ++step) {
      r.optimizer.cpu_offload = true;
      r.optimizer.offload_fraction = step / 20.0;
      if (r.optimizer.offload_fraction <= q.optimizer.effective_fraction()) continue;
      const std::optional<int64_t> total = replanned(r);
      if (total && *total <= device_memory) found = std::make_pair(r.optimizer.offload_fraction, *total);
    }
    const std::string moments = bf16 ? " with bf16 moments" : "";
    if (found)
      fixes.push_back(fmt::format("--optimizer-cpu-offload --optimizer-offload-fraction {:.2f}{}: fits ({})",
                                  found->first, moments, format_bytes(found->second)));
    else if (const std::optional<int64_t> all = replanned(r))
      fixes.push_back(fmt::format("even --optimizer-offload-fraction 1{} leaves {}", moments, format_bytes(*all)));
  }
  if (!q.recompute.active() && !q.recompute.selective()) {
    // Selective recompute first: it repeats no GEMM.
    PlanRequest r = q;
    r.recompute.granularity = RecomputeOptions::Granularity::Selective;
    r.recompute.moe_act = r.recompute.layernorm = true;
    if (const std::optional<int64_t> total = replanned(r); total && *total <= device_memory)
      fixes.push_back(fmt::format("--recompute-granularity selective --recompute-modules moe_act layernorm: fits ({}; the "
                                  "experts' activations and the norms' outputs made again in each layer's backward)",
                                  format_bytes(*total)));
  }
  if (!q.recompute.active()) {
    // Recompute: the fewest layers per stage (block) that fit, each one more forward per micro-batch.
    int64_t most = 0;
    for (const StagePlan& s : plan.stages) most = std::max(most, s.end_layer - s.first_layer);
    PlanRequest r = q;
    r.recompute.granularity = RecomputeOptions::Granularity::Full;
    r.recompute.method = RecomputeOptions::Method::Block;
    std::optional<std::pair<int64_t, int64_t>> found;
    for (int64_t n = 1; n <= most && !found; ++n) {
      r.recompute.num_layers = n;
      const std::optional<int64_t> total = replanned(r);
      if (total && *total <= device_memory) found = std::make_pair(n, *total);
    }
    if (found) {
      fixes.push_back(fmt::format("--recompute-granularity full --recompute-method block --recompute-num-layers {}: fits "
                                  "({}; the forward of {} layer{} per stage runs again in each micro-batch's backward)",
                                  found->first, format_bytes(found->second), found->first, found->first == 1 ? "" : "s"));
    } else {
      r.recompute.method = RecomputeOptions::Method::Uniform;
      r.recompute.num_layers = 1;
      if (const std::optional<int64_t> all = replanned(r))
        fixes.push_back(fmt::format("even --recompute-granularity full --recompute-method uniform --recompute-num-layers 1 "
                                    "(every layer) leaves {}", format_bytes(*all)));
    }
  }
  {  // more pipeline stages (an even split), more GPUs
    PlanRequest r = q;
    r.layout.pp = q.layout.pp * 2;
    r.layout.pp_layers.clear();
    if (const std::optional<int64_t> total = replanned(r))
      fixes.push_back(fmt::format("--pp {} (even split, {} GPUs): {}", r.layout.pp, r.layout.world(), verdict(total, device_memory)));
  }
  {  // more expert-parallel ranks (over more data-parallel ranks when the dense ranks run out)
    PlanRequest r = q;
    r.layout.ep = q.layout.ep * 2;
    std::optional<int64_t> total = replanned(r);
    if (!total) {
      r.layout.dp = q.layout.dp * 2;
      r.global_batch = std::max(q.global_batch, static_cast<int64_t>(r.layout.dp));
      total = replanned(r);
    }
    if (total)
      fixes.push_back(fmt::format("--ep {}{} ({} GPUs): {}", r.layout.ep,
                                  r.layout.dp != q.layout.dp ? fmt::format(" --dp {}", r.layout.dp) : "",
                                  r.layout.world(), verdict(total, device_memory)));
  }
  {  // fewer tokens per micro-batch: quill runs one row per micro-batch, so a shorter row
    PlanRequest r = q;
    r.row_tokens = q.row_tokens / 2;
    if (const std::optional<int64_t> total = replanned(r))
      fixes.push_back(fmt::format("rows of {} tokens (one row per micro-batch is already the fewest): {}", r.row_tokens,
                                  verdict(total, device_memory)));
  }
  if (!fixes.empty()) {
    v.message += ". What would make it fit (each planned again):";
    for (const std::string& f : fixes) v.message += "\n  " + f;
  }
  return v;
}

}  // namespace quill::plan
