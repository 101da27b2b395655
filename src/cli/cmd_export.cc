// `quill export`: a Hugging Face checkpoint from a training checkpoint (train/checkpoint_export.h), on
// one process or under mpirun/srun on any number of ranks, whatever layout trained it. The form, dtype
// and sources are `quill train --save-hf`'s flags; given the same ones, the files equal the in-run
// export's byte for byte (docs/hf-export.md).
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "base/error.h"
#include "base/timer.h"
#include "cli/commands.h"
#include "comm/distributed.h"
#include "comm/mpi_comm.h"
#include "io/hf_checkpoint.h"
#include "io/hf_names.h"
#include "io/streamed_hf_export.h"
#include "train/checkpoint_export.h"

namespace quill::cli {

namespace fs = std::filesystem;

void add_export_command(CLI::App& app, Runner& run) {
  CLI::App* cmd = app.add_subcommand(
      "export", "write a Hugging Face checkpoint from a training checkpoint (any layout, on any number of ranks)");
  static CheckpointExportRequest r;
  static std::string hf_format, hf_dtype = "bf16";
  static bool overwrite = false, no_verify = false, quiet = false;
  cmd->add_option("--checkpoint", r.checkpoint_dir,
                  "the training checkpoint: a run's --save DIR (the iteration its latest_checkpointed_iteration.txt "
                  "names, as --load takes it), or one checkpoint directory (DIR/iter_NNNNNNN, holding state.json)")
      ->required();
  cmd->add_option("--ckpt-step", r.ckpt_step,
                  "with a --save DIR: export iteration N instead of the latest (Megatron's flag, as quill train --load "
                  "takes it)");
  cmd->add_option("--out", r.out_dir, "the Hugging Face checkpoint directory to write")->required();
  cmd->add_option("--hf-format", hf_format,
                  "release (the release's names and multimodal config.json; needs --init or --config of a release "
                  "checkpoint) | transformers (InklingForCausalLM); default: --init's form, else transformers");
  cmd->add_option("--save-hf-dtype", hf_dtype, "bf16 (default, as released) | fp32");
  cmd->add_option("--init", r.init_dir,
                  "the --init the run started from: its config.json, pass-through tensors and side files, as the "
                  "in-run export takes them");
  cmd->add_option("--config", r.config_path,
                  "the --config the run was given (must be the checkpoint's model; the transformers form carries its "
                  "extra keys)");
  cmd->add_flag("--no-verify-checkpoint", no_verify, "export without checking state.json's and the shards' SHA-256");
  cmd->add_flag("--overwrite", overwrite, "replace a non-empty --out");
  cmd->add_flag("--quiet", quiet, "no progress line");
  run = [] {
    if (!hf_format.empty()) r.options.format = parse_hf_format(hf_format, "--hf-format");
    r.options.dtype = parse_hf_export_dtype(hf_dtype, "--save-hf-dtype");
    r.checks.verify_bytes = !no_verify;
    QUILL_CHECK(r.ckpt_step >= -1, "--ckpt-step {}: must be >= 0 (an iteration of the --checkpoint directory)",
                r.ckpt_step);
    // Before any file is hashed.
    QUILL_CHECK(overwrite || !fs::exists(r.out_dir) || !fs::is_directory(r.out_dir) || fs::is_empty(r.out_dir),
                "--out {}: exists and is not empty (give --overwrite to replace it)", r.out_dir);
    checked_hf_out_dir(r.out_dir, /*overwrite=*/true);
    std::unique_ptr<Distributed> dist;
    if (launched_by_mpi()) dist = init_distributed();
    Comm* world = dist && dist->size() > 1 ? &dist->world() : nullptr;
    const bool lead = !dist || dist->rank() == 0;
    r.show_progress = lead && !quiet;
    Timer timer;
    const CheckpointExportResult done = export_train_checkpoint(r, world, DeviceContext::cpu());
    if (!lead) return 0;
    for (const std::string& note : done.plan.notes) std::fprintf(stderr, "note: export: %s\n", note.c_str());
    if (!done.report.dropped.empty())
      std::fprintf(stderr, "note: export: %zu tensors of %s are in the other form's names and are not written (first %s)\n",
                   done.report.dropped.size(), r.init_dir.c_str(), done.report.dropped.front().c_str());
    std::printf("exported %s (saved after %lld steps) to %s: %s form, %s, %zu tensors%s, in %.1f s on %d rank%s\n",
                done.checkpoint_dir.c_str(), static_cast<long long>(done.next_step), r.out_dir.c_str(),
                hf_format_name(done.plan.format), done.plan.dtype == DType::F32 ? "fp32" : "bf16",
                done.report.written.size(),
                done.report.passed_through.empty() ? "" : fmt::format(" + {} passed through", done.report.passed_through.size()).c_str(),
                timer.seconds(), dist ? dist->size() : 1, dist && dist->size() > 1 ? "s" : "");
    std::printf("%s\n", export_memory_note(done.report).c_str());
    return 0;
  };
}

}  // namespace quill::cli
