// `quill project DIR... [flags]`: the step time, tokens/s/GPU, MFU and $ per million tokens of a whole
// layout from the run directories of `quill train --simulate-rank R` (one rank per pipeline stage, or
// fewer), their measured compute and exact collective bytes, and the communication model's bandwidths
// (docs/comm-model.md). Prints the table; --out writes DIR/projection.json.
#include <cstdio>

#include "base/file_util.h"
#include "cli/commands.h"
#include "cli/count_flags.h"
#include "cli/projection_report.h"

namespace quill::cli {

void add_project_command(CLI::App& app, Runner& run) {
  CLI::App* cmd = app.add_subcommand(
      "project", "project a layout's step time, tokens/s/GPU, MFU and $/M tokens from simulated ranks' runs");
  static std::vector<std::string> dirs;
  static ProjectionFlags flags;
  static std::string out, json_path;
  cmd->add_option("runs", dirs, "run directories of quill train --simulate-rank (at most one per pipeline stage)")
      ->required();
  add_projection_flags(cmd, flags, /*workload=*/true);
  cmd->add_option("--out", out, "write OUT/projection.json (created if missing)");
  cmd->callback([&run, cmd] {
    run = [cmd] {
      if (cmd->count("--global-batch") > 0) check_positive("--global-batch", flags.global_batch);  // else the runs'
      const ProjectionReport rep = project_runs(dirs, flags);
      std::printf("%s", rep.text.c_str());
      if (!out.empty()) {
        make_dirs(out);
        write_projection(out, rep);
        std::printf("projection in %s/projection.json\n", out.c_str());
      }
      return 0;
    };
  });
}

}  // namespace quill::cli
