#include "train/checkpoint_saver.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "base/error.h"
#include "base/timer.h"
#include "parallel/host_reduce.h"
#include "train/checkpoint_history.h"

namespace quill {

namespace {

std::string megabytes(double bytes) {
  return bytes >= 1e9 ? fmt::format("{:.2f} GB", bytes / 1e9) : fmt::format("{:.1f} MB", bytes / 1e6);
}

}  // namespace

CheckpointSaver::CheckpointSaver(SaverSettings settings, CheckpointIdentity identity, const ParamTable& params,
                                 const AdamW& optimizer, const DeviceContext& ctx, const Layout& layout)
    : settings_(std::move(settings)),
      identity_(std::move(identity)),
      params_(params),
      optimizer_(optimizer),
      ctx_(ctx),
      layout_(layout) {}

CheckpointSaver::~CheckpointSaver() {
  if (writer_.joinable()) writer_.join();
}

void CheckpointSaver::save(int64_t next_step) {
  if (pending_) {
    if (settings_.lead && !settings_.quiet)
      std::fprintf(stderr,
                   "%s: after step %lld: the checkpoint of iteration %lld is still being written; saving "
                   "iteration %lld waits for it (never two saves at once)\n",
                   settings_.command.c_str(), static_cast<long long>(next_step), static_cast<long long>(pending_->next_step),
                   static_cast<long long>(next_step));
    wait();
  }
  Timer copy;
  pending_ = snapshot_train_checkpoint(iteration_dir(settings_.root, next_step), next_step, params_, optimizer_, ctx_,
                                       layout_, /*own_copy=*/settings_.async);
  copy_s_ = copy.seconds();
  written_.store(false);
  error_ = nullptr;
  if (settings_.async) {
    start_writer();
    return;
  }
  Timer write;
  write_snapshot_shard(*pending_, settings_.lead && !settings_.quiet);
  write_s_ = write.seconds();
  written_.store(true);
  finish();
}

void CheckpointSaver::start_writer() {
  // The snapshot is this thread's alone until written_ is set; the main thread only reads the flag.
  writer_ = std::thread([this] {
    try {
      Timer write;
      if (settings_.test_write_delay_s > 0)
        std::this_thread::sleep_for(std::chrono::duration<double>(settings_.test_write_delay_s));
      // No progress line: it would be drawn between the training's step lines.
      write_snapshot_shard(*pending_, /*show_progress=*/false);
      write_s_ = write.seconds();
    } catch (...) {
      error_ = std::current_exception();
    }
    written_.store(true);
  });
}

void CheckpointSaver::poll() {
  if (!pending_) return;
  // Every rank asks at the same boundary, so all finish the save at the same one.
  if (max_over(layout_.world(), ctx_, written_.load() ? 0.0 : 1.0) == 0.0) finish();
}

void CheckpointSaver::wait() {
  if (!pending_) return;
  if (writer_.joinable()) writer_.join();
  finish();
}

void CheckpointSaver::finish() {
  if (writer_.joinable()) writer_.join();  // written: the thread is ending
  Comm* world = layout_.world();
  CheckpointSnapshot s = std::move(*pending_);
  pending_.reset();
  // A rank whose shard failed stops every rank, before anything is sealed.
  if (max_over(world, ctx_, error_ ? 1.0 : 0.0) > 0) {
    if (error_) std::rethrow_exception(error_);
    QUILL_FAIL("{}: another rank could not write its shard of this checkpoint (its message says why)", s.dir);
  }
  Timer seal;
  seal_train_checkpoint(s, identity_, world, ctx_);
  const double seal_s = seal.seconds();
  const double total_bytes = sum_over(world, ctx_, static_cast<double>(s.bytes));
  const double slowest_write_s = max_over(world, ctx_, write_s_);
  std::vector<std::string> retired;
  if (settings_.lead) {
    // Only now, with the directory complete under its name, does the latest file move on.
    write_latest_iteration(settings_.root, s.next_step);
    retired = retire_checkpoints(settings_.root, settings_.keep_last, s.next_step);
  }
  latest_ = s.next_step;
  if (!settings_.lead || settings_.quiet) return;
  const std::string size =
      s.world_size > 1 ? fmt::format("{} from {} ranks", megabytes(total_bytes), s.world_size) : megabytes(total_bytes);
  const double rate = total_bytes / 1e6 / std::max(slowest_write_s, 1e-9);
  std::string line =
      settings_.async
          ? fmt::format("saved checkpoint {} (step {}) in the background: {}, copied to host memory in {:.2f} s at the "
                        "step boundary, written in {:.2f} s ({:.1f} MB/s), sealed in {:.2f} s",
                        s.dir, s.next_step, size, copy_s_, slowest_write_s, rate, seal_s)
          : fmt::format("saved checkpoint {} (step {}): {} in {:.2f} s ({:.1f} MB/s)", s.dir, s.next_step, size,
                        copy_s_ + slowest_write_s + seal_s, rate);
  for (const std::string& r : retired)
    line += fmt::format("; removed {} (--keep-last-checkpoints {})", std::filesystem::path(r).filename().string(),
                        settings_.keep_last);
  std::fprintf(stderr, "%s: %s\n", settings_.command.c_str(), line.c_str());
}

}  // namespace quill
