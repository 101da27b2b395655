// quill: one executable, subcommands. Errors from bad input arrive as quill::Error and become one
// line on stderr and exit status 1 (under mpirun: one line for the job when every rank fails alike);
// so does an unknown flag or command (with the nearest known one).
#include <cstdio>

#include "base/error.h"
#include "cli/commands.h"
#include "comm/error_report.h"
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
  quill::cli::add_run_command(app, run, args);
  quill::cli::add_plan_command(app, run);
  quill::cli::add_project_command(app, run);
  quill::cli::add_tune_command(app, run);
  quill::cli::add_export_command(app, run);
  // Under a launcher, an error every rank shares is printed once, by rank 0 (comm/error_report.h).
  auto report = [](const char* message) {
    quill::report_error(message);
    return 1;
  };
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // An unknown argument first: a mistyped required flag would otherwise read as the flag's absence.
    if (const std::optional<std::string> line = quill::cli::unknown_argument_line(app, e)) return report(line->c_str());
    return app.exit(e);
  }
  try {
    return run ? run() : 0;
  } catch (const std::exception& e) {
    return report(e.what());
  }
}
