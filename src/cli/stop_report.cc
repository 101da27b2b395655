#include "cli/stop_report.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>

#include "base/stop_signal.h"

namespace quill::cli {

namespace {

// A word as a POSIX shell reads it back: bare when it holds only safe characters, else in single quotes.
std::string shell_word(const std::string& w) {
  const bool safe = !w.empty() && w.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                                                      "@%+=:,./_-") == std::string::npos;
  if (safe) return w;
  std::string q = "'";
  for (char c : w) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// "quill train" or "quill run": the subcommand args name.
std::string command_name(const std::vector<std::string>& args) {
  return args.size() > 1 && args[1] == "run" ? "quill run" : "quill train";
}

}  // namespace

std::string resume_command(const std::vector<std::string>& args, const std::string& load_dir,
                           const std::string& launcher) {
  std::vector<std::string> kept;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    // --resume is the same option as --load; --ckpt-step would go back to an older iteration than the one
    // just saved.
    if (a == "--overwrite" || a.starts_with("--resume=") || a.starts_with("--load=") || a.starts_with("--ckpt-step="))
      continue;
    if (a == "--resume" || a == "--load" || a == "--ckpt-step") {
      ++i;  // and its value
      continue;
    }
    kept.push_back(a);
  }
  kept.push_back("--load");
  kept.push_back(load_dir);
  std::string line = launcher;
  for (const std::string& w : kept) line += (line.empty() ? "" : " ") + shell_word(w);
  return line;
}

std::string launcher_words(int world) {
  if (world <= 1) return "";
  const char* slurm = std::getenv("SLURM_JOB_ID");
  if (slurm != nullptr && *slurm != '\0') return "srun";
  return fmt::format("mpirun -np {}", world);
}

std::string stop_report(const TrainResult& r, const TrainOptions& o, const std::vector<std::string>& args) {
  const std::string launcher = launcher_words(r.world_size);
  const int64_t trained = static_cast<int64_t>(r.steps.size());
  std::string text = fmt::format("{}: {} received: {} stopped after {} of {} steps{}", command_name(args),
                                 stop_signal_name(r.stop_signal),
                                 r.world_size > 1 ? fmt::format("all {} ranks", r.world_size) : "the run",
                                 r.next_step, o.steps,
                                 trained > 0 ? fmt::format(" ({} steps trained by this start)", trained) : "");
  if (!r.saved_checkpoint.empty()) {
    text += fmt::format("; checkpoint saved to {} (next step {}). Continue with:\n  {}\n", r.saved_checkpoint, r.next_step,
                        resume_command(args, o.save_dir, launcher));
  } else if (trained == 0 && !o.resume_dir.empty()) {
    text += fmt::format("; no step was trained, {} still holds the run at step {}. Continue with:\n  {}\n", o.resume_dir,
                        r.next_step,
                        resume_command(args, o.resume_dir, launcher) +
                            (o.ckpt_step >= 0 ? fmt::format(" --ckpt-step {}", o.ckpt_step) : std::string()));
  } else if (trained == 0) {
    text += "; no step was trained and nothing was written: start it again with the same command\n";
  } else if (command_name(args) == "quill run") {
    // quill run's --save is its --out: its checkpoints come with --save-interval alone.
    text += fmt::format(
        "; nothing was saved: quill run writes checkpoints only with --save-interval N (its command line or the "
        "recipe's run flags), and these {} steps are lost. Start again with --overwrite and --save-interval N so that "
        "a stopped run can be continued\n",
        trained);
  } else {
    text += fmt::format(
        "; nothing was saved: without --save DIR no checkpoint is written, and these {} steps are lost. Start again "
        "with --overwrite, and give --save DIR (with --save-interval N) so that a stopped run can be continued\n",
        trained);
  }
  return text;
}

std::optional<int> finish_if_stopped(const TrainResult& r, const TrainOptions& o, const std::vector<std::string>& args) {
  if (r.stop_signal != 0) {
    if (r.lead) std::fprintf(stderr, "%s", stop_report(r, o, args).c_str());
    return stop_exit_status(r.stop_signal);
  }
  if (StopSignals::received() != 0 && r.lead)
    std::fprintf(stderr, "%s: %s received after the last step: the run completed\n", command_name(args).c_str(),
                 stop_signal_name(StopSignals::received()));
  return std::nullopt;
}

}  // namespace quill::cli
