#include "train/tensorboard.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "base/error.h"
#include "base/writable_dir.h"
#include "train/expert_load.h"
#include "train/step_report.h"

namespace quill {

namespace fs = std::filesystem;

namespace {

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

}  // namespace

void check_tensorboard_dir(const std::string& dir) {
  if (!dir.empty()) check_dir_writable("--tensorboard-dir", dir, dir);
}

std::vector<TensorBoardScalar> step_scalars(const StepMetrics& m, const TensorBoardRun& run) {
  // tokens/s and MFU of this one step, as the run's summary computes them over its median step.
  TrainResult one;
  one.steps = {m};
  one.active_params = run.active_params;
  one.world_size = run.world_size;
  const StepSummary s = summarize_steps(one);

  std::vector<TensorBoardScalar> scalars = {
      {"lm loss", static_cast<float>(m.loss)},
      {"learning rate", static_cast<float>(m.lr)},
      {"grad norm", static_cast<float>(m.grad_norm)},
      {"tokens/s", static_cast<float>(s.tokens_per_s)},
      {"step time (s)", static_cast<float>(m.step_time_s)},
  };
  // Megatron's tag for the validation loss ('{} validation'.format('lm loss'), evaluate_and_print_results).
  if (m.valid_loss) scalars.push_back({"lm loss validation", static_cast<float>(*m.valid_loss)});
  if (m.memory.peak_bytes >= 0)
    scalars.push_back({"peak memory (GiB)", static_cast<float>(static_cast<double>(m.memory.peak_bytes) / (1 << 30))});
  if (!run.simulated) scalars.push_back({"mfu", static_cast<float>(s.mfu)});
  QUILL_CHECK(m.expert_tokens.empty() || m.expert_tokens.size() == run.moe_layers.size(),
              "tensorboard: counts of {} layers, {} MoE layers", m.expert_tokens.size(), run.moe_layers.size());
  for (size_t l = 0; l < m.expert_tokens.size(); ++l) {
    const int64_t layer = run.moe_layers[l];
    // worst_imbalance of one layer is that layer's max/mean (0 when no token was routed).
    const ExpertImbalance load = worst_imbalance({m.expert_tokens[l]}, {layer});
    int64_t idle = 0;
    for (int64_t n : m.expert_tokens[l]) idle += n == 0;
    scalars.push_back({fmt::format("expert load/max over mean/layer {}", layer), static_cast<float>(load.max_over_mean)});
    scalars.push_back({fmt::format("expert load/idle experts/layer {}", layer), static_cast<float>(idle)});
  }
  return scalars;
}

TensorBoardLog::TensorBoardLog(const std::string& dir, TensorBoardRun run) : run_(std::move(run)) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  QUILL_CHECK(!ec, "--tensorboard-dir {}: cannot create the directory ({})", dir, ec.message());
  path_ = fmt::format("{}/events.out.tfevents.{}.{}", dir, static_cast<int64_t>(std::time(nullptr)), host_name());
  file_ = std::make_unique<AppendFile>(path_, "scalars");
  write(file_version_event(unix_seconds()));
}

void TensorBoardLog::append(const StepMetrics& m) { write(scalars_event(unix_seconds(), m.step, step_scalars(m, run_))); }

void TensorBoardLog::write(const std::string& event) { file_->write(tf_record(event)); }

}  // namespace quill
