#include "cli/memory_flags.h"

#include <cctype>
#include <cmath>

#include "base/error.h"

namespace quill::cli {

void add_device_memory_flag(CLI::App* cmd, std::string& value) {
  cmd->add_option("--device-memory", value,
                  "memory of each device to check the layout's memory plan against, e.g. 141GB or 80GiB (default: "
                  "the GPU's total; on the CPU no check without it)");
}

int64_t parse_device_memory(const std::string& text) { return parse_memory_size("--device-memory", text); }

int64_t parse_memory_size(const std::string& flag, const std::string& text) {
  if (text.empty()) return -1;
  size_t end = 0;
  double value = 0;
  try {
    value = std::stod(text, &end);
  } catch (const std::exception&) {
    QUILL_FAIL("{}: '{}' is not a size (bytes, or a number with KiB/MiB/GiB/TiB or KB/MB/GB/TB)", flag, text);
  }
  std::string unit = text.substr(end);
  while (!unit.empty() && std::isspace(static_cast<unsigned char>(unit.front()))) unit.erase(0, 1);
  double scale = 0;
  const std::pair<const char*, double> units[] = {{"", 1},         {"B", 1},       {"KiB", 1024.0},     {"MiB", 1048576.0},
                                                  {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}, {"KB", 1e3},
                                                  {"MB", 1e6},     {"GB", 1e9},    {"TB", 1e12}};
  for (const auto& [name, s] : units)
    if (unit == name) scale = s;
  QUILL_CHECK(scale > 0 && value > 0 && std::isfinite(value),
              "{}: '{}' is not a size (bytes, or a number with KiB/MiB/GiB/TiB or KB/MB/GB/TB)", flag, text);
  return static_cast<int64_t>(std::llround(value * scale));
}

plan::PlanRequest plan_request_for(const TrainOptions& o, const InklingConfig& config, const LayoutSpec& layout,
                                   const std::string& device, int64_t row_tokens) {
  plan::PlanRequest q;
  q.config = config;
  q.layout = layout;
  q.row_tokens = row_tokens;
  q.global_batch = o.global_batch;
  q.device = device == "cuda" ? Device::CUDA : Device::CPU;
  q.optimizer = o.adam.memory;
  q.freeze = o.freeze_patterns;
  q.recompute = o.recompute;
  q.tp_comm_overlap = o.tp_comm_overlap;
  q.overlap_moe_ep_comm = o.overlap_moe_ep_comm;
  q.delay_wgrad_compute = o.delay_wgrad_compute;
  q.expert_wgrad_micro_batches = o.moe_expert_wgrad_micro_batches;
  return q;
}

}  // namespace quill::cli
