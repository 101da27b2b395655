#include "train/checkpoint_history.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <set>
#include <string>

#include "base/error.h"
#include "base/file_util.h"
#include "io/dir_swap.h"

namespace quill {

namespace fs = std::filesystem;

namespace {

constexpr size_t kDigits = 7;
constexpr const char* kPrefix = "iter_";

bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c) != 0; });
}

// The iteration of a name "iter_NNNNNNN" (more digits past 9,999,999 steps, as Megatron's format
// widens), or -1.
int64_t iteration_of(const std::string& name) {
  if (!name.starts_with(kPrefix)) return -1;
  const std::string digits = name.substr(std::char_traits<char>::length(kPrefix));
  if (digits.size() < kDigits || !all_digits(digits)) return -1;
  return std::stoll(digits);
}

// The base name of a side directory a swap leaves ("iter_0000004.tmp-123" -> "iter_0000004"), or "".
std::string side_base(const std::string& name) {
  for (const char* tag : {".tmp-", ".new-", ".old-"}) {
    const size_t at = name.rfind(tag);
    if (at == std::string::npos || !all_digits(name.substr(at + 5))) continue;
    const std::string base = name.substr(0, at);
    return iteration_of(base) >= 0 ? base : "";
  }
  return "";
}

// A copy of root/name that a swap killed half-way left complete (recover_dir would put it back).
bool recoverable(const std::string& root, const std::string& name) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return false;
  for (const fs::directory_entry& e : fs::directory_iterator(root, ec)) {
    const std::string n = e.path().filename().string();
    if (side_base(n) == name && n.find(".tmp-", name.size()) == std::string::npos &&
        fs::exists(e.path() / "state.json", ec))
      return true;
  }
  return false;
}

bool complete(const std::string& dir) {
  std::error_code ec;
  return fs::is_regular_file(fs::path(dir) / "state.json", ec);
}

std::string list_iterations(const std::vector<int64_t>& its) {
  if (its.empty()) return "none";
  return fmt::format("{}", fmt::join(its, ", "));
}

}  // namespace

std::string iteration_dir_name(int64_t iteration) { return fmt::format("{}{:07d}", kPrefix, iteration); }

std::string iteration_dir(const std::string& root, int64_t iteration) {
  return (fs::path(root) / iteration_dir_name(iteration)).string();
}

std::optional<int64_t> latest_iteration(const std::string& root) {
  const std::string path = (fs::path(root) / kLatestIterationFile).string();
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return std::nullopt;
  std::string text = read_file(path);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  QUILL_CHECK(all_digits(text) && text.size() <= 18,
              "{}: holds '{}', not an iteration number (quill writes the step count of the newest complete "
              "checkpoint, as Megatron does)",
              path, text.substr(0, 40));
  return std::stoll(text);
}

void write_latest_iteration(const std::string& root, int64_t iteration) {
  write_file_atomic((fs::path(root) / kLatestIterationFile).string(), std::to_string(iteration) + "\n", /*flush=*/true);
  fsync_dir(root);  // the rename itself survives a crash
}

std::vector<int64_t> saved_iterations(const std::string& root) {
  std::vector<int64_t> out;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return out;
  for (const fs::directory_entry& e : fs::directory_iterator(root, ec)) {
    const int64_t it = iteration_of(e.path().filename().string());
    if (it >= 0 && complete(e.path().string())) out.push_back(it);
  }
  std::sort(out.begin(), out.end());
  return out;
}

CheckpointChoice choose_checkpoint(const std::string& load, int64_t ckpt_step, bool start_fresh, const std::string& flag) {
  const std::optional<int64_t> latest = latest_iteration(load);
  const std::vector<int64_t> saved = saved_iterations(load);
  const auto available = [&](int64_t it) {
    return complete(iteration_dir(load, it)) || recoverable(load, iteration_dir_name(it));
  };
  if (ckpt_step >= 0) {
    QUILL_CHECK(!complete(load) || latest,
                "--ckpt-step {}: {} {} is one checkpoint (its state.json), not a --save directory of iterations; "
                "leave --ckpt-step out to use it",
                ckpt_step, flag, load);
    QUILL_CHECK(available(ckpt_step),
                "--ckpt-step {}: {} {} holds no complete {} (its checkpoints: iterations {}; latest: {})", ckpt_step,
                flag, load, iteration_dir_name(ckpt_step), list_iterations(saved),
                latest ? std::to_string(*latest) : std::string("none"));
    return {iteration_dir(load, ckpt_step), ckpt_step,
            latest && *latest != ckpt_step
                ? fmt::format("{} {}: resuming iteration {} (--ckpt-step), not the latest {}", flag, load, ckpt_step,
                              *latest)
                : ""};
  }
  if (latest) {
    QUILL_CHECK(available(*latest),
                "{} {}: {} names iteration {}, but {} is not there or not complete (its checkpoints: iterations {}); "
                "give --ckpt-step N to use another",
                flag, load, kLatestIterationFile, *latest, iteration_dir_name(*latest), list_iterations(saved));
    return {iteration_dir(load, *latest), *latest, ""};
  }
  if (complete(load)) return {load, -1, ""};  // one checkpoint directory (the form before iterations, or iter_N itself)
  if (!saved.empty()) {
    // A save killed after its directory was complete but before the latest file named it: the
    // directory is whole (it appears under its name only complete), so the newest one continues.
    return {iteration_dir(load, saved.back()), saved.back(),
            fmt::format("{} {}: no {} (a save was stopped before naming its checkpoint): resuming the newest complete "
                        "one, iteration {}",
                        flag, load, kLatestIterationFile, saved.back())};
  }
  QUILL_CHECK(start_fresh,
              "{} {}: no checkpoint there (no {} and no iter_NNNNNNN directory); give --start-fresh-if-no-checkpoint "
              "to start a fresh run when none exists yet (quill never does so silently), or the --save directory of "
              "the run to continue",
              flag, load, kLatestIterationFile);
  return {"", -1,
          fmt::format("{} {}: no checkpoint there yet: starting fresh (--start-fresh-if-no-checkpoint)", flag, load)};
}

std::vector<std::string> retire_checkpoints(const std::string& root, int64_t keep, int64_t latest) {
  std::vector<std::string> removed;
  if (keep <= 0) return removed;
  std::vector<int64_t> others;  // in the order they are kept: below the latest (newest first), then above it
  const std::vector<int64_t> saved = saved_iterations(root);
  for (auto it = saved.rbegin(); it != saved.rend(); ++it)
    if (*it < latest) others.push_back(*it);
  for (auto it = saved.rbegin(); it != saved.rend(); ++it)
    if (*it > latest) others.push_back(*it);  // left by a run that went on from an older --ckpt-step
  for (size_t i = static_cast<size_t>(std::max<int64_t>(0, keep - 1)); i < others.size(); ++i) {
    const std::string dir = iteration_dir(root, others[i]);
    const std::string aside = dir + ".old-" + std::to_string(::getpid());
    std::error_code ec;
    fs::remove_all(aside, ec);
    fs::rename(dir, aside, ec);
    QUILL_CHECK(!ec, "{}: cannot move aside to remove it ({})", dir, ec.message());
    fs::remove_all(aside, ec);
    QUILL_CHECK(!ec, "{}: cannot remove ({})", aside, ec.message());
    removed.push_back(dir);
  }
  if (!removed.empty()) fsync_dir(root);
  return removed;
}

std::vector<std::string> tidy_checkpoint_history(const std::string& root) {
  std::vector<std::string> notes;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return notes;
  std::set<std::string> bases;
  std::vector<fs::path> latest_temps;
  for (const fs::directory_entry& e : fs::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    if (const std::string base = side_base(name); !base.empty()) bases.insert(base);
    if (name.starts_with(std::string(kLatestIterationFile) + ".tmp.")) latest_temps.push_back(e.path());
  }
  for (const std::string& base : bases) {
    const std::string dir = (fs::path(root) / base).string();
    if (std::optional<std::string> from = recover_dir(dir))
      notes.push_back(fmt::format("{}: recovered from {} (an earlier run was killed while saving it)", dir, *from));
    for (const std::string& s : remove_stale_side_dirs(dir))
      notes.push_back(fmt::format("{}: removed, left by a save that did not finish", s));
  }
  // A latest file's temporary copy: the rename never happened, so the old latest file stands.
  for (const fs::path& p : latest_temps) fs::remove(p, ec);
  return notes;
}

}  // namespace quill
