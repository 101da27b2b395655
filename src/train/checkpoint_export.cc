#include "train/checkpoint_export.h"

#include <algorithm>
#include <filesystem>
#include <optional>

#include "base/error.h"
#include "io/streamed_hf_writer.h"
#include "train/checkpoint_history.h"
#include "train/checkpoint_weights.h"

namespace quill {

namespace fs = std::filesystem;

namespace {

// The checkpoint directory `quill export --checkpoint DIR [--ckpt-step N]` reads. Every rank chooses
// (so that a refusal stops each with the same message), then all take world rank 0's iteration: a run
// still saving into DIR may name a newer one between two ranks' reads.
std::string checkpoint_to_export(const std::string& dir, int64_t ckpt_step, Comm* world) {
  const bool iterations = latest_iteration(dir).has_value() || !saved_iterations(dir).empty();
  // One checkpoint (iter_NNNNNNN itself, or the form before iterations), or a directory that is neither:
  // CheckpointWeights::open names what is wrong with it. A run's --out (quill run's checkpoints are
  // OUT/checkpoint) is named as such, with the directory to give.
  if (ckpt_step < 0 && !iterations) {
    const std::string inner = (fs::path(dir) / "checkpoint").string();
    std::error_code ec;
    QUILL_CHECK(fs::is_regular_file(fs::path(dir) / "state.json", ec) ||
                    !(latest_iteration(inner).has_value() || !saved_iterations(inner).empty()),
                "--checkpoint {}: holds a run's outputs, not its checkpoints; give --checkpoint {} (the run's --save "
                "directory)",
                dir, inner);
    return dir;
  }
  // Read-only, as --load chooses: the iteration the latest file names, or --ckpt-step's; refusals name the
  // iterations there.
  CheckpointChoice choice = choose_checkpoint(dir, ckpt_step, /*start_fresh=*/false, "--checkpoint");
  if (world && world->size() > 1) {
    Tensor it = Tensor::empty({1}, DType::I64);
    it.data_as<int64_t>()[0] = choice.iteration;
    world->broadcast(it, 0);
    if (const int64_t lead = it.data_as<int64_t>()[0]; lead != choice.iteration)
      choice.dir = lead >= 0 ? iteration_dir(dir, lead) : dir;
  }
  // A save killed mid-swap leaves the iteration under a side name; putting it back is a write, which
  // an export does not make.
  std::error_code ec;
  QUILL_CHECK(fs::is_regular_file(fs::path(choice.dir) / "state.json", ec),
              "--checkpoint {}: {} was being replaced when a save was killed; `quill train --load {}` puts it back, "
              "or give --ckpt-step N for another iteration",
              dir, choice.dir, dir);
  return choice.dir;
}

}  // namespace

CheckpointExportResult export_train_checkpoint(const CheckpointExportRequest& request, Comm* world,
                                               const DeviceContext& ctx) {
  // The model the caller names (--config, else --init's), which the checkpoint must hold; else its own.
  std::optional<InklingConfig> named;
  if (!request.config_path.empty()) named = load_inkling_config(request.config_path);
  else if (!request.init_dir.empty()) named = load_inkling_config(request.init_dir);
  CheckpointChecks checks = request.checks;
  checks.use = "export";
  CheckpointExportResult result;
  result.checkpoint_dir = checkpoint_to_export(request.checkpoint_dir, request.ckpt_step, world);
  const CheckpointWeights weights =
      CheckpointWeights::open(result.checkpoint_dir, named ? &*named : nullptr, checks, world, ctx);
  result.next_step = weights.next_step();
  result.plan = plan_hf_export(weights.config(), request.init_dir, request.config_path, request.options);

  StreamedHfWriter writer(result.plan, request.out_dir, weights.config(), world, ctx, request.show_progress);
  // The pieces in table order, dealt to the ranks by where each starts in the running element count:
  // shares of about equal bytes, the same deal on every rank.
  struct Job {
    size_t param;
    const SavedPiece* piece;
  };
  std::vector<Job> jobs;
  int64_t total = 0;
  for (size_t i = 0; i < writer.params().size(); ++i)
    for (const SavedPiece& p : weights.pieces(writer.params()[i].name)) {
      jobs.push_back({i, &p});
      total += p.end - p.begin;
    }
  const int rank = world ? world->rank() : 0, size = world ? world->size() : 1;
  std::vector<Job> mine;
  int64_t before = 0, my_elements = 0;
  for (const Job& j : jobs) {
    const int64_t n = j.piece->end - j.piece->begin;
    if (static_cast<int>((static_cast<__int128>(before) * size) / std::max<int64_t>(total, 1)) == rank) {
      mine.push_back(j);
      my_elements += n;
    }
    before += n;
  }
  writer.expect(my_elements);
  const int64_t chunk = kHfExportFetchBytes / static_cast<int64_t>(sizeof(float));
  std::vector<float> buf;
  for (const Job& j : mine) {
    for (int64_t at = j.piece->begin; at < j.piece->end; at += chunk) {
      const int64_t m = std::min(chunk, j.piece->end - at);
      buf.resize(static_cast<size_t>(m));
      weights.read(*j.piece, at, m, buf.data());
      writer.write(j.param, at, buf.data(), m);
    }
  }
  result.report = writer.finish();
  return result;
}

}  // namespace quill
