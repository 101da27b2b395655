#include "model/recompute.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "base/error.h"

namespace quill {

std::string RecomputeOptions::describe() const {
  if (selective()) return fmt::format("selective{}{}", moe_act ? " moe_act" : "", layernorm ? " layernorm" : "");
  if (!active()) return "none";
  return fmt::format("full {} {}", method == Method::Uniform ? "uniform" : "block", num_layers);
}

namespace {

void parse_modules(RecomputeOptions& r, const std::vector<std::string>& modules) {
  // Megatron's default module list for selective granularity is core_attn.
  QUILL_CHECK(!modules.empty(),
              "--recompute-granularity selective recomputes Megatron's default module core_attn, which quill has no "
              "use for: its attention keeps no [T, T] tensor (q, k, v, the output and the row statistics only); give "
              "--recompute-modules moe_act and/or layernorm");
  for (const std::string& m : modules) {
    if (m == "moe_act") {
      r.moe_act = true;
    } else if (m == "layernorm") {
      r.layernorm = true;
    } else {
      QUILL_CHECK(m != "core_attn",
                  "--recompute-modules core_attn: quill's attention keeps no [T, T] tensor (q, k, v, the output and the "
                  "row statistics only), so there is nothing to recompute; moe_act and layernorm are built");
      QUILL_CHECK(false,
                  "--recompute-modules {}: not built in quill (moe_act and layernorm are; --recompute-granularity full "
                  "recomputes whole layers)", m);
    }
  }
}

}  // namespace

RecomputeOptions parse_recompute(const std::string& granularity, const std::string& method, int64_t num_layers,
                                 const std::vector<std::string>& modules) {
  RecomputeOptions r;
  const bool none = granularity.empty() || granularity == "none";
  QUILL_CHECK(none || granularity == "full" || granularity == "selective",
              "--recompute-granularity: '{}' is not full or selective", granularity);
  if (granularity != "selective")
    QUILL_CHECK(modules.empty(), "--recompute-modules {} needs --recompute-granularity selective",
                fmt::join(modules, " "));
  if (none || granularity == "selective") {
    // Megatron: "recompute method is not yet supported for selective recomputing granularity". The layer count
    // (default 1) belongs to full granularity too.
    const char* why = none ? "" : " (selective keeps every layer)";
    QUILL_CHECK(method.empty(), "--recompute-method {} needs --recompute-granularity full{}", method, why);
    QUILL_CHECK(num_layers == 1, "--recompute-num-layers {} needs --recompute-granularity full{}", num_layers, why);
  }
  if (none) return r;
  if (granularity == "selective") {
    r.granularity = RecomputeOptions::Granularity::Selective;
    parse_modules(r, modules);
    return r;
  }
  r.granularity = RecomputeOptions::Granularity::Full;
  QUILL_CHECK(method.empty() || method == "uniform" || method == "block",
              "--recompute-method: '{}' is not uniform or block", method);
  r.method = method == "block" ? RecomputeOptions::Method::Block : RecomputeOptions::Method::Uniform;
  QUILL_CHECK(num_layers >= 1, "--recompute-num-layers {}: give 1 or more layers", num_layers);
  r.num_layers = num_layers;
  return r;
}

std::vector<std::pair<int64_t, int64_t>> recompute_groups(const RecomputeOptions& o, int64_t stage_layers) {
  std::vector<std::pair<int64_t, int64_t>> groups;
  if (!o.active()) return groups;
  if (o.method == RecomputeOptions::Method::Uniform) {
    for (int64_t b = 0; b < stage_layers; b += o.num_layers) groups.emplace_back(b, std::min(stage_layers, b + o.num_layers));
  } else {
    for (int64_t b = 0; b < std::min(stage_layers, o.num_layers); ++b) groups.emplace_back(b, b + 1);
  }
  return groups;
}

}  // namespace quill
