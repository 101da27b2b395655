// `quill check convergence` and `quill check config`: the correctness checks of
// recipes-and-measurement.md §4-5. Each prints its JSON and exits 0 on pass, 1 on fail.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "recipe/config_check.h"
#include "recipe/convergence.h"
#include "recipe/recipe.h"

namespace quill::cli {

void add_check_commands(CLI::App& app, Runner& run) {
  CLI::App* check = app.add_subcommand("check", "correctness checks of a candidate run or recipe against a reference");
  check->require_subcommand(1);

  static std::string candidate, reference;
  CLI::App* conv = check->add_subcommand(
      "convergence", "compare two loss curves (metrics.jsonl, or one loss per line) with Megatron-Bridge's "
                     "validate_convergence at its pipeline thresholds");
  conv->add_option("--candidate", candidate, "the run under test")->required();
  conv->add_option("--reference", reference, "the reference run or golden curve")->required();
  conv->callback([&run] {
    run = [] {
      const ConvergenceResult r = check_convergence(read_loss_curve(candidate), read_loss_curve(reference));
      nlohmann::json j = r.to_json();
      j["candidate"] = candidate;
      j["reference"] = reference;
      std::printf("%s\n", j.dump(2).c_str());
      return r.passed ? 0 : 1;
    };
  });

  static std::string cand_recipe, ref_recipe;
  static std::vector<std::string> set;
  CLI::App* config = check->add_subcommand(
      "config", "class every setting that differs between two recipes as numerics, placement or unknown; "
                "pass when all are placement");
  config->add_option("candidate", cand_recipe, "candidate recipe YAML")->required();
  config->add_option("reference", ref_recipe, "reference recipe YAML")->required();
  config->add_option("--set", set, "NAME=VALUE for a variable of both run scripts (repeatable)");
  config->callback([&run] {
    run = [] {
      ConfigCheckOptions o;
      for (const std::string& s : set) o.set.insert(parse_assignment(s));
      const ConfigCheckResult r = check_config(read_recipe(cand_recipe), read_recipe(ref_recipe), o);
      nlohmann::json j = r.to_json();
      j["candidate"] = cand_recipe;
      j["reference"] = ref_recipe;
      std::printf("%s\n", j.dump(2).c_str());
      return r.passed ? 0 : 1;
    };
  });
}

}  // namespace quill::cli
