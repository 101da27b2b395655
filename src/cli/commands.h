// Subcommands of the one `quill` executable. Each registers its options on a CLI11 app and returns
// the function that runs it; each is a thin shell over the library layers.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace quill::cli {

using Runner = std::function<int()>;

void add_model_commands(CLI::App& app, Runner& run);
// `args`: the command line as given (argv), for the command that continues a stopped run.
void add_train_command(CLI::App& app, Runner& run, const std::vector<std::string>& args);
void add_run_command(CLI::App& app, Runner& run, const std::vector<std::string>& args);
void add_data_commands(CLI::App& app, Runner& run);
void add_demo_command(CLI::App& app, Runner& run);
void add_recipe_commands(CLI::App& app, Runner& run);
void add_check_commands(CLI::App& app, Runner& run);
void add_plan_command(CLI::App& app, Runner& run);
void add_project_command(CLI::App& app, Runner& run);
void add_tune_command(CLI::App& app, Runner& run);
void add_export_command(CLI::App& app, Runner& run);

}  // namespace quill::cli
