// `quill demo`: the built-in default job — the tiny Inkling config trained on the bundled synthetic
// conversations, on the CPU, with a progress line per step and a falling loss.
#include <cstdio>

#include "base/error.h"
#include "base/file_util.h"
#include "cli/commands.h"
#include "data/build_rows.h"
#include "data/byte_tokenizer.h"
#include "data/conversation.h"
#include "model/params.h"
#include "train/trainer.h"

namespace quill::cli {

void add_demo_command(CLI::App& app, Runner& run) {
  CLI::App* cmd = app.add_subcommand("demo", "train the tiny Inkling model on the bundled data (CPU)");
  static std::string source_dir = QUILL_SOURCE_DIR, out = "runs/demo";
  static int64_t steps = 300, batch = 4;
  cmd->add_option("--source-dir", source_dir, "quill's source tree (for configs/ and data/)");
  cmd->add_option("--out", out, "output directory");
  cmd->add_option("--steps", steps, "optimizer steps");
  cmd->callback([&run] {
    run = [] {
      const std::string rows_dir = out + "/rows";
      BuildOptions build;
      build.seed = 42;
      build.row_tokens = 128;
      build.source = source_dir + "/data/synthetic/conversations.jsonl";
      make_dirs(out);
      std::printf("quill demo: rendering %s into %lld-token rows\n", build.source.c_str(),
                  static_cast<long long>(build.row_tokens));
      const auto manifest = build_rows(read_conversations_jsonl(build.source), ByteTokenizer(), build, rows_dir);
      std::printf("  %lld rows, supervised token ratio %.3f\n", manifest.at("rows").get<long long>(),
                  manifest.at("supervised_token_ratio").get<double>());

      TrainOptions o;
      o.config_path = source_dir + "/configs/tiny.json";
      o.rows_dir = rows_dir;
      o.seed = 1234;
      o.steps = steps;
      o.global_batch = batch;
      o.lr.max_lr = 1e-2;
      o.lr.min_lr = 1e-3;
      o.lr.warmup_fraction = 0.05;
      o.adam.beta2 = 0.95;
      o.adam.weight_decay = 0.1;
      o.freeze_patterns = miles_frozen_patterns();
      o.out_dir = out;
      // The demo's directory is its own: running it again replaces its earlier run (its rows stay).
      o.overwrite = true;
      std::printf("quill demo: training %s for %lld steps, %lld rows per step, on the CPU\n", o.config_path.c_str(),
                  static_cast<long long>(steps), static_cast<long long>(batch));
      TrainResult r = run_training(o);
      QUILL_CHECK(!r.steps.empty(), "demo ran no step");
      std::printf("quill demo: loss %.3f -> %.3f in %.1f s; metrics in %s/metrics.jsonl\n", r.steps.front().loss,
                  r.steps.back().loss, r.wall_time_s, out.c_str());
      return 0;
    };
  });
}

}  // namespace quill::cli
