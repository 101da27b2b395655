// The configuration check (recipes-and-measurement.md §5): two recipes are compared setting by
// setting -- model, gpu, workload, layout, the env section and the run flags that define the run
// (Megatron defaults applied, so an explicit default equals an absent flag) -- and every setting that
// differs is classed numerics (changes the function computed), placement (changes only where and when
// work runs) or unknown (never assumed placement). The check passes only when every difference is
// placement. Flags irrelevant to the math (logging, paths, timeouts) count as placement, noted as
// launcher settings; the layout's descriptive text (label, summary, highlights) is not a setting.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "recipe/flag_table.h"
#include "recipe/recipe.h"
#include "recipe/run_flags.h"

namespace quill {

struct SettingDiff {
  std::string setting;                   // "layout.tp", "--lr", "env.NCCL_ALGO"
  std::optional<std::string> candidate;  // nothing: absent
  std::optional<std::string> reference;
  SettingClass cls = SettingClass::Unknown;  // Numerics, Placement or Unknown
  std::string note;
};

struct ConfigCheckResult {
  bool passed = false;
  std::vector<SettingDiff> differences;
  std::vector<std::string> notes;  // what the check could not see (unexpanded arrays, unresolved values)
  nlohmann::json to_json() const;
};

struct ConfigCheckOptions {
  VarMap set;  // --set NAME=VALUE for both run scripts
};

ConfigCheckResult check_config(const Recipe& candidate, const Recipe& reference, const ConfigCheckOptions& options = {});

}  // namespace quill
