// quill: one executable, subcommands. Errors from bad input arrive as quill::Error and become one
// line on stderr and exit status 1; so does an unknown flag or command (with the nearest known one).
#include <cstdio>

#include "base/error.h"
#include "cli/commands.h"
#include "cli/unknown_argument.h"

int main(int argc, char** argv) {
  CLI::App app{"quill: a C++/CUDA trainer for Inkling-family Mixture-of-Experts models"};
  app.require_subcommand(1);
  quill::cli::Runner run;
  const std::vector<std::string> args(argv, argv + argc);
  quill::cli::add_model_commands(app, run);
  quill::cli::add_train_command(app, run, args);
  quill::cli::add_data_commands(app, run);
  quill::cli::add_demo_command(app, run);
  quill::cli::add_recipe_commands(app, run);
  quill::cli::add_check_commands(app, run);
  quill::cli::add_run_command(app, run);
  quill::cli::add_plan_command(app, run);
  quill::cli::add_project_command(app, run);
  quill::cli::add_tune_command(app, run);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // An unknown argument first: a mistyped required flag would otherwise read as the flag's absence.
    if (const std::optional<std::string> line = quill::cli::unknown_argument_line(app, e)) {
      std::fprintf(stderr, "quill: error: %s\n", line->c_str());
      return 1;
    }
    return app.exit(e);
  }
  try {
    return run ? run() : 0;
  } catch (const quill::Error& e) {
    std::fprintf(stderr, "quill: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "quill: error: %s\n", e.what());
    return 1;
  }
}
