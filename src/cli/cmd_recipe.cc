// `quill recipe validate|flags|format`: check a recipe, show what its run flags define, and write it
// back through the typed model (a round trip that keeps every field).
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "recipe/recipe.h"
#include "recipe/validate.h"

extern char** environ;

namespace quill::cli {

namespace {

struct RecipeArgs {
  std::string file;
  std::vector<std::string> set;
  int64_t layers = 0;
  bool shell_env = false;
};

void add_common(CLI::App* cmd, RecipeArgs& a) {
  cmd->add_option("file", a.file, "recipe YAML")->required();
  cmd->add_option("--set", a.set, "NAME=VALUE for a variable of the run script (repeatable)");
  cmd->add_option("--layers", a.layers, "the model's decoder layers (default: known models, e.g. Inkling-Small 42)");
  cmd->add_flag("--shell-env", a.shell_env, "also resolve the run script's variables from this shell's environment");
}

CheckOptions options_of(const RecipeArgs& a) {
  CheckOptions o;
  for (const std::string& s : a.set) o.set.insert(parse_assignment(s));
  if (a.layers > 0) o.num_layers = a.layers;
  if (a.shell_env)
    for (char** e = environ; *e; ++e) {
      std::string kv(*e);
      size_t eq = kv.find('=');
      if (eq != std::string::npos) o.extra_env[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
  return o;
}

nlohmann::json flags_json(const RecipeCheck& c) {
  nlohmann::json j;
  j["found"] = c.flags.found;
  j["program"] = c.flags.program;
  nlohmann::json flags = nlohmann::json::array();
  for (const ParsedFlag& f : c.flags.flags) {
    nlohmann::json x;
    x["flag"] = "--" + f.name;
    x["value"] = f.spec && f.spec->kind == FlagKind::Switch ? nlohmann::json(true) : nlohmann::json(f.value());
    x["class"] = class_name(f.cls());
    x["understood"] = f.spec != nullptr;
    if (!f.unresolved.empty()) x["unresolved"] = f.unresolved;
    flags.push_back(x);
  }
  j["flags"] = flags;
  j["unknown"] = c.flags.unknown;
  nlohmann::json arrays = nlohmann::json::array();
  for (const UnexpandedArray& a : c.flags.unexpanded) arrays.push_back({{"array", a.name}, {"source", a.source}});
  j["unexpanded"] = arrays;
  j["unresolved"] = c.flags.unresolved;
  j["problems"] = c.flags.problems;
  j["definition"] = c.definition.to_json();
  nlohmann::json dis = nlohmann::json::array();
  for (const Disagreement& d : c.disagreements)
    dis.push_back({{"field", d.field}, {"recipe", d.recipe_value}, {"flags", d.flag_value}, {"flag", d.flags},
                   {"note", d.note}});
  j["disagreements"] = dis;
  return j;
}

}  // namespace

void add_recipe_commands(CLI::App& app, Runner& run) {
  CLI::App* recipe = app.add_subcommand("recipe", "read, check and write OpenRecipes recipes");
  recipe->require_subcommand(1);

  static RecipeArgs validate_args;
  CLI::App* validate = recipe->add_subcommand(
      "validate", "print the recipe's problems (and warnings: flags not understood, flags that disagree with the "
                  "layout) one per line; exit 1 when there is a problem");
  add_common(validate, validate_args);
  validate->callback([&run] {
    run = [] {
      const Recipe r = read_recipe(validate_args.file);
      const RecipeCheck c = check_recipe(r, options_of(validate_args));
      for (const Problem& p : c.problems) std::printf("problem: %s\n", p.text().c_str());
      for (const std::string& w : c.warnings) std::printf("warning: %s\n", w.c_str());
      std::printf("%s: %s (%zu problem%s, %zu warning%s)\n", validate_args.file.c_str(),
                  c.problems.empty() ? "valid" : "invalid", c.problems.size(), c.problems.size() == 1 ? "" : "s",
                  c.warnings.size(), c.warnings.size() == 1 ? "" : "s");
      return c.problems.empty() ? 0 : 1;
    };
  });

  static RecipeArgs flags_args;
  CLI::App* flags = recipe->add_subcommand(
      "flags", "print the run script's flags (with their classes), what they define (Megatron defaults applied) "
               "and where they disagree with the layout, as JSON");
  add_common(flags, flags_args);
  flags->callback([&run] {
    run = [] {
      const Recipe r = read_recipe(flags_args.file);
      const RecipeCheck c = check_recipe(r, options_of(flags_args));
      std::printf("%s\n", flags_json(c).dump(2).c_str());
      return 0;
    };
  });

  static std::string format_in, format_out;
  CLI::App* format = recipe->add_subcommand(
      "format", "read a recipe into the typed model and write it back (every field kept, in order)");
  format->add_option("file", format_in, "recipe YAML")->required();
  format->add_option("--out", format_out, "where to write (default: standard output)");
  format->callback([&run] {
    run = [] {
      const Recipe r = read_recipe(format_in);
      if (format_out.empty()) std::fputs(recipe_to_yaml(r).c_str(), stdout);
      else write_recipe(format_out, r);
      return 0;
    };
  });
}

}  // namespace quill::cli
