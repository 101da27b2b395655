#include "model/recompute.h"

#include <fmt/format.h>

#include <algorithm>

#include "base/error.h"

namespace quill {

std::string RecomputeOptions::describe() const {
  if (!active()) return "none";
  return fmt::format("full {} {}", method == Method::Uniform ? "uniform" : "block", num_layers);
}

RecomputeOptions parse_recompute(const std::string& granularity, const std::string& method, int64_t num_layers) {
  RecomputeOptions r;
  if (granularity.empty() || granularity == "none") {
    QUILL_CHECK(method.empty(), "--recompute-method {} needs --recompute-granularity full", method);
    return r;
  }
  QUILL_CHECK(granularity != "selective",
              "--recompute-granularity selective: quill recomputes whole layers only; give "
              "--recompute-granularity full with --recompute-method uniform|block --recompute-num-layers N");
  QUILL_CHECK(granularity == "full", "--recompute-granularity: '{}' is not full or selective", granularity);
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
