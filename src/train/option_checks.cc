#include "train/option_checks.h"

#include <cmath>
#include <filesystem>

#include "base/error.h"
#include "io/checkpoint_dir.h"

namespace quill {

namespace {

void in_range(const char* flag, double v, double lo, bool lo_open, double hi, bool hi_open, const char* range) {
  const bool ok = std::isfinite(v) && (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
  QUILL_CHECK(ok, "{} {}: must be {}", flag, v, range);
}

constexpr double kInf = INFINITY;

}  // namespace

void check_train_options(const TrainOptions& o) {
  QUILL_CHECK(!o.out_dir.empty(), "--out is required");
  QUILL_CHECK(!o.rows_dir.empty(), "--rows is required");
  QUILL_CHECK(o.steps > 0, "--steps {}: must be positive", o.steps);
  QUILL_CHECK(o.global_batch > 0, "--global-batch {}: must be positive", o.global_batch);

  const LrSchedule& s = o.lr;
  in_range("--lr", s.max_lr, 0, false, kInf, true, "a finite number >= 0");
  in_range("--min-lr", s.min_lr, 0, false, kInf, true, "a finite number >= 0");
  QUILL_CHECK(s.min_lr <= s.max_lr, "--min-lr {} is above --lr {}: the decay ends at --min-lr, so it must not exceed --lr",
              s.min_lr, s.max_lr);
  QUILL_CHECK(s.style == "cosine" || s.style == "linear" || s.style == "constant",
              "--lr-decay-style '{}': must be cosine, linear or constant", s.style);
  QUILL_CHECK(s.decay_steps >= 0, "--lr-decay-steps {}: must be >= 0 (0: --steps)", s.decay_steps);
  in_range("--warmup-fraction", s.warmup_fraction, 0, false, 1, true, "in [0, 1): warm-up shorter than the decay");
  const int64_t decay = s.decay_steps > 0 ? s.decay_steps : o.steps;
  QUILL_CHECK(s.warmup_steps < 0 || s.warmup_steps < decay,
              "warm-up of {} steps is not shorter than the decay's {} steps", s.warmup_steps, decay);

  const AdamWConfig& a = o.adam;
  in_range("--beta1", a.beta1, 0, false, 1, true, "in [0, 1)");
  in_range("--beta2", a.beta2, 0, false, 1, true, "in [0, 1)");
  in_range("--adam-eps", a.eps, 0, false, kInf, true, "a finite number >= 0");
  in_range("--weight-decay", a.weight_decay, 0, false, kInf, true, "a finite number >= 0");
  in_range("--clip-grad", a.clip_grad, 0, false, kInf, true, "a finite number >= 0 (0: no clipping)");

  QUILL_CHECK(o.save_interval >= 0, "--save-interval {}: must be >= 0 (0: only at the end)", o.save_interval);
  QUILL_CHECK(o.save_interval == 0 || !o.save_dir.empty(), "--save-interval {} needs --save DIR (where to write them)",
              o.save_interval);
  if (!o.save_dir.empty()) {
    namespace fs = std::filesystem;
    QUILL_CHECK(fs::weakly_canonical(o.save_dir) != fs::weakly_canonical(o.out_dir),
                "--save {} is --out itself: give the checkpoint its own directory (e.g. {}/checkpoint)", o.save_dir,
                o.out_dir);
  }
  QUILL_CHECK(o.keep_last_checkpoints >= 0, "--keep-last-checkpoints {}: must be >= 0 (0: keep every checkpoint)",
              o.keep_last_checkpoints);
  QUILL_CHECK(o.keep_last_checkpoints == 0 || !o.save_dir.empty(),
              "--keep-last-checkpoints {} needs --save DIR (the checkpoints to keep)", o.keep_last_checkpoints);
  QUILL_CHECK(!o.async_save || !o.save_dir.empty(), "--async-save needs --save DIR (where to write the checkpoints)");
  QUILL_CHECK(o.ckpt_step >= -1, "--ckpt-step {}: must be >= 0 (an iteration of the --load directory)", o.ckpt_step);
  QUILL_CHECK(o.ckpt_step < 0 || !o.resume_dir.empty(), "--ckpt-step {} needs --load DIR (the directory that holds it)",
              o.ckpt_step);
  QUILL_CHECK(!o.start_fresh_if_no_checkpoint || !o.resume_dir.empty(),
              "--start-fresh-if-no-checkpoint needs --load DIR (the directory to resume from when it holds a checkpoint)");
  QUILL_CHECK(o.eval_interval >= 0, "--eval-interval {}: must be >= 0 (0: evaluate after the last step only)",
              o.eval_interval);
  QUILL_CHECK(o.eval_iters >= 1, "--eval-iters {}: must be at least 1 (global batches per evaluation)", o.eval_iters);
  QUILL_CHECK(o.eval_interval == 0 || !o.valid_rows_dir.empty(),
              "--eval-interval {} needs --valid-rows DIR (the held-out rows to evaluate on: quill data build "
              "--valid-fraction writes them)",
              o.eval_interval);
  QUILL_CHECK(o.valid_rows_dir.empty() || o.simulate_rank < 0,
              "--valid-rows with --simulate-rank: a simulated rank measures a training step; leave the evaluation out");
  QUILL_CHECK(o.stop_after >= -1, "--stop-after {}: must be >= 0", o.stop_after);
  QUILL_CHECK(o.dump_grads_step >= -1 && o.dump_grads_step < o.steps,
              "--dump-grads-step {}: must be a step of the run (0 to {})", o.dump_grads_step, o.steps - 1);
  QUILL_CHECK(o.replay_routing_file.empty() || o.dump_grads_step >= 0, "--replay-routing needs --dump-grads-step");
  // The dump sums each bucket's gradients itself before the optimizer; by then an overlapped
  // reduce-scatter has already summed them in place.
  QUILL_CHECK(o.dump_grads_step < 0 || !o.adam.ddp.overlap_grad_reduce,
              "--dump-grads-step reads the gradients before their reduction, which --overlap-grad-reduce starts during "
              "the backward: give one or the other");
  QUILL_CHECK(o.adam.ddp.bucket_size == -1 || o.adam.ddp.bucket_size > 0, "--ddp-bucket-size {}: must be positive",
              o.adam.ddp.bucket_size);
  QUILL_CHECK(o.profile_step >= -1 && o.profile_step < o.steps, "--profile-step {}: must be a step of the run (0 to {})",
              o.profile_step, o.steps - 1);
  QUILL_CHECK(o.warmup_steps >= 0, "--warmup-steps {}: must be >= 0", o.warmup_steps);
  in_range("--distributed-timeout-minutes", o.distributed_timeout_minutes, 0, true, kInf, true, "a positive number");
}

void check_init_dir(const TrainOptions& o) {
  if (o.init_dir.empty()) return;
  namespace fs = std::filesystem;
  const std::string& dir = o.init_dir;
  std::error_code ec;
  QUILL_CHECK(fs::exists(dir, ec), "--init {}: no such directory (a Hugging Face checkpoint directory: config.json and "
              "model.safetensors)", dir);
  QUILL_CHECK(fs::is_directory(dir, ec), "--init {}: not a directory (a Hugging Face checkpoint directory: config.json "
              "and model.safetensors)", dir);
  QUILL_CHECK(!o.config_path.empty() || fs::is_regular_file(fs::path(dir) / "config.json", ec),
              "--init {}: no config.json (the model's shape); give --config, or a checkpoint directory that holds it", dir);
  QUILL_CHECK(CheckpointDir::is_checkpoint_dir(dir), "--init {}: no {} and no {}: not a Hugging Face checkpoint directory",
              dir, CheckpointDir::kSingleFile, CheckpointDir::kIndexFile);
}

void check_freeze_patterns(const ParamTable& params, const std::vector<std::string>& patterns) {
  for (const std::string& pattern : patterns) {
    bool matched = false;
    for (const Param& p : params.params()) matched = matched || name_matches(p.name, pattern);
    QUILL_CHECK(matched, "--freeze '{}' matches no parameter of the model (names look like model.llm.layers.0.attn.wq_du.weight)",
                pattern);
  }
}

}  // namespace quill
