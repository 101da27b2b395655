#include "train/run_dir.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/file_util.h"
#include "base/writable_dir.h"
#include "io/dir_swap.h"
#include "train/checkpoint_history.h"
#include "train/tensorboard.h"

namespace quill {

namespace fs = std::filesystem;

namespace {

// OUT/save.json, {"save": "<--save DIR, absolute>"}: where the run in OUT writes its checkpoints, so that
// a later start names the checkpoint that continues it, and accepts --resume DIR outside OUT.
constexpr const char* kSaveRecord = "save.json";

bool non_empty_dir(const std::string& dir) {
  std::error_code ec;
  return fs::is_directory(dir, ec) && !fs::is_empty(dir, ec);
}

// True when `inner` is `outer` or lies below it.
bool lies_inside(const std::string& inner, const std::string& outer) {
  const fs::path a = fs::weakly_canonical(inner), b = fs::weakly_canonical(outer);
  auto [end_b, end_a] = std::mismatch(b.begin(), b.end(), a.begin(), a.end());
  return end_b == b.end();
}

// What quill train and quill run write into --out (everything a later run could be confused by).
bool is_run_output(const std::string& name) {
  for (const char* exact : {"metrics.jsonl", "summary.json", kSaveRecord, "collectives.json", "projection.json", "checkpoint", "hf",
                            "recipe.yaml", "run.svg"})
    if (name == exact) return true;
  for (const char* prefix : {"checkpoint.", "hf.", "grads_step", "op_profile_step", "metrics.jsonl.tmp.", "summary.json.tmp.", "run.svg.tmp.",
                             "collectives.json.tmp.", "projection.json.tmp."})
    if (name.rfind(prefix, 0) == 0) return true;
  return false;
}

void remove_or_fail(const fs::path& p) {
  std::error_code ec;
  fs::remove_all(p, ec);
  QUILL_CHECK(!ec, "{}: cannot remove ({})", p.string(), ec.message());
}

void tidy_swaps(const std::string& dir, std::vector<std::string>& notes) {
  if (std::optional<std::string> from = recover_dir(dir))
    notes.push_back(fmt::format("{}: recovered from {} (an earlier run was killed while replacing it)", dir, *from));
  for (const std::string& s : remove_stale_side_dirs(dir))
    notes.push_back(fmt::format("{}: removed, left by a run that no longer runs", s));
  // A --save DIR of iterations: the saves a kill interrupted inside it.
  for (const std::string& line : tidy_checkpoint_history(dir)) notes.push_back(line);
}

// A checkpoint to continue from in `save`: its latest file, an iteration directory, or (the form
// before iterations) a state.json of its own.
bool holds_checkpoint(const std::string& save) {
  std::error_code ec;
  return fs::exists(fs::path(save) / kLatestIterationFile, ec) || !saved_iterations(save).empty() ||
         fs::exists(fs::path(save) / "state.json", ec);
}

// The --save DIR the run in `out` recorded, or "" (none recorded: run without --save, or by a quill
// before the record; a record that cannot be read counts as none).
std::string recorded_save_dir(const std::string& out) {
  const std::string path = out + "/" + kSaveRecord;
  if (!fs::exists(path)) return "";
  try {
    return nlohmann::json::parse(read_file(path)).at("save").get<std::string>();
  } catch (const std::exception&) {
    return "";
  }
}

bool same_dir(const std::string& a, const std::string& b) { return fs::weakly_canonical(a) == fs::weakly_canonical(b); }

// How to go on from the earlier run in a non-empty `out`: the checkpoint that continues it, where
// one exists.
std::string continue_hint(const std::string& out) {
  std::string save = recorded_save_dir(out);
  if (save.empty() && fs::exists(out + "/checkpoint")) save = out + "/checkpoint";  // quill run's place
  if (!save.empty() && holds_checkpoint(save))
    return fmt::format("its checkpoint is {}: give --load {} to continue it", save, save);
  if (!save.empty())
    return fmt::format("it saved to {} but no checkpoint is there: nothing to continue from", save);
  return "it was run without --save: no checkpoint exists to continue it from";
}

}  // namespace

void check_run_dir(const TrainOptions& o) {
  QUILL_CHECK(!fs::exists(o.out_dir) || fs::is_directory(o.out_dir), "--out {}: exists and is not a directory", o.out_dir);
  const std::string recorded = o.resume_dir.empty() ? "" : recorded_save_dir(o.out_dir);
  const bool resuming_here = !o.resume_dir.empty() && (lies_inside(o.resume_dir, o.out_dir) ||
                                                        (!recorded.empty() && same_dir(o.resume_dir, recorded)));
  QUILL_CHECK(!non_empty_dir(o.out_dir) || resuming_here || o.overwrite,
              "--out {}: holds an earlier run; {}; --overwrite replaces it, or give a new --out", o.out_dir,
              o.resume_dir.empty() ? continue_hint(o.out_dir)
                                   : fmt::format("--load {} is not its checkpoint ({})", o.resume_dir,
                                                 continue_hint(o.out_dir)));
  if (!o.save_dir.empty() && !lies_inside(o.save_dir, o.out_dir)) {
    const bool resuming_it = !o.resume_dir.empty() && fs::weakly_canonical(o.resume_dir) == fs::weakly_canonical(o.save_dir);
    QUILL_CHECK(!non_empty_dir(o.save_dir) || resuming_it || o.overwrite,
                "--save {}: holds a checkpoint of another run; resume it (--load {}), give --overwrite to replace it, "
                "or a new --save",
                o.save_dir, o.save_dir);
  }
}

void check_outputs_writable(const TrainOptions& o) {
  check_dir_writable("--out", o.out_dir, o.out_dir);
  // Checkpoints are written inside --save DIR (DIR/iter_NNNNNNN.tmp-PID, then renamed).
  if (!o.save_dir.empty()) check_dir_writable("--save", o.save_dir, o.save_dir);
  check_tensorboard_dir(o.tensorboard_dir);
}

std::vector<std::string> recover_checkpoint(const std::string& dir) {
  std::vector<std::string> notes;
  tidy_swaps(dir, notes);
  return notes;
}

PreparedRunDir prepare_run_dir(const TrainOptions& o) {
  PreparedRunDir r;
  r.created_out = !fs::exists(o.out_dir);
  if (o.overwrite && fs::is_directory(o.out_dir)) {
    for (const fs::directory_entry& e : fs::directory_iterator(o.out_dir))
      if (is_run_output(e.path().filename().string())) remove_or_fail(e.path());
    if (!o.save_dir.empty() && fs::exists(o.save_dir) &&
        (o.resume_dir.empty() || !lies_inside(o.resume_dir, o.save_dir)))
      remove_or_fail(o.save_dir);
    r.notes.push_back(fmt::format("{}: --overwrite: removed the earlier run's outputs", o.out_dir));
  }
  if (!o.save_dir.empty()) tidy_swaps(o.save_dir, r.notes);
  tidy_swaps(o.out_dir + "/checkpoint", r.notes);
  tidy_swaps(o.out_dir + "/hf", r.notes);
  make_dirs(o.out_dir);
  const std::string record = o.out_dir + "/" + kSaveRecord;
  if (!o.save_dir.empty()) {
    write_file_atomic(record, nlohmann::json{{"save", fs::absolute(o.save_dir).lexically_normal().string()}}.dump() + "\n");
  } else if (o.resume_dir.empty()) {
    std::error_code ec;
    fs::remove(record, ec);  // a fresh run that saves nowhere: an earlier run's record would name its checkpoint
  }
  if (!o.save_dir.empty()) make_dirs(o.save_dir);  // its iterations are written inside it
  return r;
}

void clean_failed_run(const TrainOptions& o, const PreparedRunDir& prepared, int64_t steps_recorded) {
  std::vector<std::string> ignored;
  try {
    if (!o.save_dir.empty()) tidy_swaps(o.save_dir, ignored);
    tidy_swaps(o.out_dir + "/hf", ignored);
    if (steps_recorded > 0) return;
    if (prepared.created_out) {
      std::error_code ec;
      fs::remove_all(o.out_dir, ec);
    } else if (o.resume_dir.empty()) {
      std::error_code ec;
      fs::remove(o.out_dir + "/metrics.jsonl", ec);  // the empty file this fresh run opened
      fs::remove(o.out_dir + "/" + kSaveRecord, ec);
    }
  } catch (const std::exception&) {
    // Tidying must never hide the error that stopped the run.
  }
}

}  // namespace quill
