#include "cli/tune_measure.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <stdlib.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "base/child_process.h"
#include "base/error.h"
#include "base/progress.h"
#include "base/file_util.h"
#include "base/timer.h"
#include "cli/simulated_run.h"
#include "cli/tune_report.h"
#include "plan/plan_report.h"
#include "tune/ledger_model.h"

namespace quill::cli {

namespace fs = std::filesystem;

namespace {

constexpr const char* kKeyFile = "measure-key.json";
constexpr const char* kKeyFormat = "quill-tune-measure-key-1";

// The config file's bytes (the model of a run's key): the file, or config.json in the directory.
std::string model_sha256(const std::string& model) {
  const std::string path = fs::is_directory(model) ? model + "/config.json" : model;
  return sha256_hex(read_file(path));
}

// The synthetic rows every run reads: the workload's row length, enough rows that a step's rows are
// mostly distinct (they wrap around: train/trainer.cc rows_for_step), at most 64.
struct RowsSpec {
  int64_t row_tokens = 0, max_rows = 0, conversations = 0;
  std::string name() const { return fmt::format("rows-t{}-n{}", row_tokens, max_rows); }
};

RowsSpec rows_spec(int64_t row_tokens, int64_t global_batch) {
  RowsSpec r;
  r.row_tokens = row_tokens;
  r.max_rows = std::clamp<int64_t>(global_batch, 1, 64);
  // A conversation of quill data synth packs into about 72 tokens (7,000 of them fill 62 rows of 8,192; 6,000
  // fill 53): one per 50 tokens wanted leaves a margin (0.3 s for 64 rows of 8,192 on this VM).
  r.conversations = std::max<int64_t>(40, r.max_rows * row_tokens / 50);
  return r;
}

std::string slug(const tune::Candidate& c) {
  const LayoutSpec& l = c.layout;
  const std::string split = l.pp_layers.empty() ? "" : fmt::format("_{}", fmt::join(l.pp_layers, "-"));
  const RecomputeOptions& r = c.recompute;
  // "-rb4" (block 4), "-rs" (selective)
  const std::string recompute =
      r.selective() ? "-rs" : r.active() ? fmt::format("-r{}{}", tune::recompute_method_name(r)[0], r.num_layers) : "";
  return fmt::format("tp{}{}-pp{}{}-ep{}-dp{}-off{:.1f}{}{}", l.tp, l.sequence_parallel && l.tp > 1 ? "sp" : "", l.pp,
                     split, l.ep, l.dp, c.optimizer.effective_fraction(),
                     c.optimizer.exp_avg == DType::BF16 || c.optimizer.exp_avg_sq == DType::BF16 ? "-bf16" : "",
                     recompute);
}


// The flags of `quill train --simulate-rank` for `rank` of the candidate: exactly its layout, its
// optimizer memory, its recompute, the workload, the tuner's frozen patterns (whole: no preset added).
std::vector<std::string> train_flags(const tune::Candidate& c, int rank, const tune::RankRequest& q,
                                     const MeasureOptions& o) {
  const LayoutSpec& l = c.layout;
  std::vector<std::string> f = {"--seed", "1", "--steps", std::to_string(o.steps), "--warmup-steps",
                                std::to_string(o.steps > 1 ? 1 : 0), "--global-batch", std::to_string(q.global_batch),
                                "--quiet", "--tp", std::to_string(l.tp), "--pp", std::to_string(l.pp), "--ep",
                                std::to_string(l.ep), "--dp", std::to_string(l.dp)};
  if (l.sequence_parallel && l.tp > 1) f.push_back("--sp");
  if (!l.pp_layers.empty()) f.insert(f.end(), {"--pp-layers", fmt::format("{}", fmt::join(l.pp_layers, ","))});
  const OptimizerMemory& m = c.optimizer;
  if (m.effective_fraction() > 0) {
    f.insert(f.end(), {"--optimizer-cpu-offload", "--optimizer-offload-fraction", fmt::format("{}", m.offload_fraction)});
    if (m.overlap_d2h_h2d) f.push_back("--overlap-cpu-optimizer-d2h-h2d");
  }
  f.insert(f.end(), {"--exp-avg-dtype", optimizer_dtype_name(m.exp_avg), "--exp-avg-sq-dtype",
                     optimizer_dtype_name(m.exp_avg_sq), "--main-grads-dtype", optimizer_dtype_name(m.main_grads)});
  const std::vector<std::string> recompute = tune::recompute_flags(c.recompute);
  f.insert(f.end(), recompute.begin(), recompute.end());
  f.insert(f.end(), {"--freeze-preset", "none"});
  for (const std::string& p : q.freeze) f.insert(f.end(), {"--freeze", p});
  f.insert(f.end(), {"--device", o.device});
  if (!o.device_memory.empty()) f.insert(f.end(), {"--device-memory", o.device_memory});
  f.insert(f.end(), {"--simulate-rank", std::to_string(rank)});
  if (l.ep > 1) f.insert(f.end(), {"--simulate-routing", "balanced"});
  return f;
}

// Why a child failed: its error (from "quill: error:" to the end of its log: the message may hold several
// lines), else its last line, and how it ended.
std::string failure_reason(const ChildResult& r, const std::string& log) {
  std::ifstream in(log);
  std::string line, error, last;
  bool in_error = false;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    last = line;
    if (line.rfind("quill: error: ", 0) == 0) {
      in_error = true;
      error = line.substr(14);
    } else if (in_error) {
      error.append(" ").append(line);
    }
  }
  std::string why = !error.empty() ? error : last;
  if (why.size() > 600) why = why.substr(0, 600) + " ...";
  return why.empty() ? r.describe() : fmt::format("{}: {}", r.describe(), why);
}

// `quill data synth` of the rows into dir/rs.name() (a quill::Error when it fails: nothing can run).
void make_rows(const std::string& quill, const RowsSpec& rs, const std::string& dir) {
  const std::string rows = dir + "/" + rs.name(), log = rows + ".log";
  std::error_code ec;
  fs::remove_all(rows, ec);  // an earlier attempt's, incomplete (no manifest.json)
  std::fprintf(stderr, "  synthetic rows: %lld rows of %lld tokens in %s\n", static_cast<long long>(rs.max_rows),
               static_cast<long long>(rs.row_tokens), rows.c_str());
  const ChildResult r = run_child({quill, "data", "synth", "--conversations", std::to_string(rs.conversations),
                                   "--row-tokens", std::to_string(rs.row_tokens), "--max-rows",
                                   std::to_string(rs.max_rows), "--seed", "1", "--out", rows},
                                  log);
  QUILL_CHECK(r.ok(), "quill tune --measure: quill data synth failed ({}); log {}", failure_reason(r, log), log);
}

// A temporary directory for the runs when --measure-dir is not given, removed at the end.
class TempDir {
 public:
  TempDir() {
    std::string t = (fs::temp_directory_path() / "quill-tune-measure-XXXXXX").string();
    QUILL_CHECK(::mkdtemp(t.data()) != nullptr, "quill tune --measure: cannot create a temporary directory in {}",
                fs::temp_directory_path().string());
    path_ = t;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The run's measured figures from its directory (a quill::Error when it does not read back).
void take_figures(MeasureRun& run) {
  const SimulatedRun sr = read_simulated_run(run.dir);
  run.passes_per_micro_batch_s = sr.m.passes_s / static_cast<double>(sr.m.micro_batches);
  run.optimizer_s = sr.m.rest_s;
  run.peak_bytes = sr.peak_bytes, run.device_used_bytes = sr.device_used_bytes, run.gpu_peak = sr.gpu_peak;
}

bool selected(const MeasureOptions& o, int candidate, int stage) {
  if (o.only.empty()) return true;
  for (const auto& [c, s] : o.only)
    if (c == candidate && (s < 0 || s == stage)) return true;
  return false;
}

std::string ms(double s) { return fmt::format("{:.3f}", 1e3 * s); }
std::string ratio(double measured, double modelled) {
  return modelled > 0 ? fmt::format("{:.3f}", measured / modelled) : "-";
}
std::string bytes_text(int64_t b) { return b < 0 ? "-" : plan::format_bytes(b); }

// What every run of one measurement shares.
struct Measurement {
  Measurement(const MeasureOptions& options, const tune::RankRequest& request, MeasureResult& result)
      : o(options), q(request), out(result) {}
  const MeasureOptions& o;
  const tune::RankRequest& q;
  MeasureResult& out;
  std::string model, model_hash, rows;
  RowsSpec rows_spec;
  bool rows_ready = false;  // made when a run first needs them (a reuse needs none)
  Timer timer;
  int run_index = 0;
};

// Stage `stage` of candidate `cand` (its modelled rank `place`): reused when its directory's key matches,
// else run unless --measure-only leaves it out or `stop` (an earlier stage's failure) says why not.
MeasureRun measure_stage(Measurement& x, const tune::Candidate& cand, int place, int stage, const std::string& stop) {
  const MeasureOptions& o = x.o;
  const RowsSpec& rs = x.rows_spec;
  MeasureRun run;
  run.stage = stage;
  run.rank = tune::stage_rank(cand.layout, stage);
  const size_t s = static_cast<size_t>(stage);
  if (s < cand.stage_roles.size()) run.role = cand.stage_roles[s];
  if (s < cand.stage_allocator_peak_bytes.size()) run.plan_allocator_peak_bytes = cand.stage_allocator_peak_bytes[s];
  if (s < cand.stage_device_bytes.size()) run.plan_device_bytes = cand.stage_device_bytes[s];
  const std::vector<std::string> flags = train_flags(cand, run.rank, x.q, o);
  const nlohmann::json key = {{"format", kKeyFormat},
                              {"model_sha256", x.model_hash},
                              {"rows", {{"row_tokens", rs.row_tokens}, {"max_rows", rs.max_rows},
                                        {"conversations", rs.conversations}, {"seed", 1}}},
                              {"train_flags", flags}};
  const std::string key_text = key.dump(1) + "\n";
  run.dir = fmt::format("{}/{}-s{}-r{}-{}", x.out.dir, slug(cand), stage, run.rank, sha256_hex(key_text).substr(0, 12));
  run.log = run.dir + "/measure.log";
  run.argv = {o.quill, "train", "--config", x.model, "--rows", x.rows};
  run.argv.insert(run.argv.end(), flags.begin(), flags.end());
  run.argv.insert(run.argv.end(), {"--overwrite", "--out", run.dir});
  const int index = ++x.run_index;
  const std::string what =
      fmt::format("candidate {} ({}), stage {} ({}), rank {}", place, cand.layout.describe(), stage, run.role, run.rank);
  // Reuse: the key file is written after a run succeeded, so a match means its outputs are complete.
  const std::string key_path = run.dir + "/" + kKeyFile;
  if (path_exists(key_path) && read_file(key_path) == key_text) {
    try {
      take_figures(run);
      run.status = "reused";
      ++x.out.reused;
      std::fprintf(stderr, "  [%d] %s: reused %s (its key matches)\n", index, what.c_str(), run.dir.c_str());
      return run;
    } catch (const Error& e) {
      std::fprintf(stderr, "  [%d] %s: %s does not read back (%s): running it again\n", index, what.c_str(),
                   run.dir.c_str(), e.what());
    }
  }
  if (!stop.empty()) {
    run.status = "not run", run.reason = stop;
    return run;
  }
  if (!selected(o, place, stage)) {
    run.status = "not run";
    run.reason = fmt::format("left out by --measure-only, and no run of it in {}", x.out.dir);
    std::fprintf(stderr, "  [%d] %s: not run (--measure-only)\n", index, what.c_str());
    return run;
  }
  if (!x.rows_ready) {
    make_rows(o.quill, rs, x.out.dir);
    x.rows_ready = true;
  }
  std::error_code ec;
  fs::remove(key_path, ec);
  fs::remove(run.log, ec);  // an earlier attempt's
  make_dirs(run.dir);
  std::fprintf(stderr, "  [%d] %s: quill train --simulate-rank %d ... (elapsed %.1f s)\n", index, what.c_str(), run.rank,
               x.timer.seconds());
  const ChildResult r = run_child(run.argv, run.log, o.timeout_s);
  run.seconds = r.seconds;
  ++x.out.started;
  if (r.ok()) {
    try {
      take_figures(run);
      run.status = "measured";
      write_file_atomic(key_path, key_text);
    } catch (const Error& e) {
      run.status = "failed", run.reason = fmt::format("its run directory does not read back: {}", e.what());
    }
  } else {
    run.status = "failed", run.reason = fmt::format("{} (log {})", failure_reason(r, run.log), run.log);
  }
  if (run.status == "failed") {
    ++x.out.failed;
    std::fprintf(stderr, "      FAILED in %.1f s: %s (elapsed %.1f s)\n", r.seconds, run.reason.c_str(), x.timer.seconds());
  } else {
    std::fprintf(stderr, "      measured in %.1f s: %s ms per micro-batch, optimizer %s ms, peak %s (elapsed %.1f s)\n",
                 r.seconds, ms(run.passes_per_micro_batch_s).c_str(), ms(run.optimizer_s).c_str(),
                 bytes_text(run.peak_bytes).c_str(), x.timer.seconds());
  }
  return run;
}

}  // namespace

std::pair<int, int> parse_measure_only(const std::string& text) {
  const size_t colon = text.find(':');
  int c = 0, s = -1;
  try {
    size_t used = 0;
    c = std::stoi(text.substr(0, colon), &used);
    QUILL_CHECK(used == (colon == std::string::npos ? text.size() : colon), "");
    if (colon != std::string::npos) {
      s = std::stoi(text.substr(colon + 1), &used);
      QUILL_CHECK(used == text.size() - colon - 1, "");
    }
  } catch (const std::exception&) {
    QUILL_FAIL("--measure-only {}: expected CANDIDATE or CANDIDATE:STAGE (the modelled rank, from 1, and a pipeline "
               "stage, from 0), e.g. 1:0",
               text);
  }
  QUILL_CHECK(c >= 1 && (colon == std::string::npos || s >= 0),
              "--measure-only {}: the candidate counts from 1, the stage from 0", text);
  return {c, s};
}

MeasureResult measure_candidates(const std::vector<tune::RankedLayout>& ranked, const tune::RankRequest& q,
                                 const MeasureOptions& o) {
  QUILL_CHECK(o.candidates >= 1, "--measure {}: give the number of candidates to measure (at least 1)", o.candidates);
  QUILL_CHECK(o.steps >= 1, "--measure-steps {}: at least one step", o.steps);
  QUILL_CHECK(o.device == "cpu" || o.device == "cuda", "--measure-device {}: cpu or cuda", o.device);
  QUILL_CHECK(o.timeout_s >= 0, "--measure-timeout {}: must be >= 0 (0: none)", o.timeout_s);
  for (const auto& [c, s] : o.only)
    QUILL_CHECK(c <= o.candidates, "--measure-only {}{}: only the first {} candidates are measured (--measure {})", c,
                s >= 0 ? fmt::format(":{}", s) : "", o.candidates, o.candidates);
  MeasureResult out;
  out.device = o.device;
  out.steps = o.steps;
  std::optional<TempDir> temp;
  if (o.dir.empty()) {
    temp.emplace();
    out.dir = temp->path();
  } else {
    make_dirs(o.dir);
    out.dir = fs::absolute(o.dir).lexically_normal().string();
    out.kept = true;
  }
  Measurement x(o, q, out);
  x.model = fs::absolute(o.model).string();
  x.model_hash = model_sha256(x.model);
  x.rows_spec = rows_spec(q.row_tokens, q.global_batch);
  x.rows = out.dir + "/" + x.rows_spec.name();  // one set for every run: the workload's row length
  x.rows_ready = path_exists(x.rows + "/manifest.json");
  const size_t count = std::min(ranked.size(), static_cast<size_t>(o.candidates));
  std::fprintf(stderr, "quill tune --measure %d: %zu candidates on %s, %d steps per run, runs in %s%s\n", o.candidates,
               count, o.device.c_str(), o.steps, out.dir.c_str(), out.kept ? "" : " (temporary)");
  // Each candidate's runs print their own lines; this one adds how far the whole measurement is and its ETA.
  ProgressOptions every_candidate = ProgressOptions::counting(true, "candidates");
  every_candidate.silent_s = 0;  // each candidate takes a run or more: its line is always worth showing
  Progress progress("quill tune --measure", every_candidate);
  for (size_t i = 0; i < count; ++i) {
    MeasuredCandidate mc;
    mc.modelled_rank = static_cast<int>(i + 1);
    mc.modelled = ranked[i];
    const tune::Candidate& cand = ranked[i].candidate;
    std::vector<tune::MeasuredStage> measured;
    std::string stop;  // an earlier stage failed: the rest are not run
    for (int stage : tune::stages_to_measure(cand.layout)) {
      MeasureRun run = measure_stage(x, cand, mc.modelled_rank, stage, stop);
      if (run.status == "failed") stop = fmt::format("stage {} of this candidate failed", stage);
      if (run.status == "measured" || run.status == "reused")
        measured.push_back({run.stage, run.rank, run.passes_per_micro_batch_s, run.optimizer_s});
      mc.runs.push_back(std::move(run));
    }
    const auto failed = std::find_if(mc.runs.begin(), mc.runs.end(), [](const MeasureRun& r) { return r.status == "failed"; });
    const auto missing = std::find_if(mc.runs.begin(), mc.runs.end(), [](const MeasureRun& r) { return r.status == "not run"; });
    if (failed != mc.runs.end()) {
      mc.status = "failed";
      mc.reason = fmt::format("stage {} (rank {}): {}", failed->stage, failed->rank, failed->reason);
    } else if (missing != mc.runs.end()) {
      mc.status = "incomplete";
      mc.reason = fmt::format("stage {} (rank {}) not run: {}", missing->stage, missing->rank, missing->reason);
    } else {
      mc.status = "measured";
      mc.projected = tune::project_candidate(cand, q, measured);
    }
    out.candidates.push_back(std::move(mc));
    progress.update(static_cast<int64_t>(i + 1), static_cast<int64_t>(count), "", /*force=*/i + 1 < count);
  }
  progress.finish();
  for (size_t i = 0; i < out.candidates.size(); ++i)
    if (out.candidates[i].projected) out.ranking.push_back(i);
  std::stable_sort(out.ranking.begin(), out.ranking.end(), [&](size_t a, size_t b) {
    return tune::ranks_before(*out.candidates[a].projected, *out.candidates[b].projected);
  });
  out.seconds = x.timer.seconds();
  return out;
}

std::string measure_text(const MeasureResult& r) {
  std::string t = fmt::format(
      "\nmeasured: the {} best candidates, one rank per stage role each as quill train --simulate-rank on {} ({} "
      "steps{}; random weights, synthetic rows); {} runs started, {} reused, {} failed in {:.1f} s; runs in {}\n",
      r.candidates.size(), r.device, r.steps, r.steps > 1 ? ", the first left out as warm-up" : "", r.started,
      r.reused, r.failed, r.seconds, r.kept ? r.dir : r.dir + " (temporary, removed)");
  t += "compute MEASURED where the compute column says so (the passes per micro-batch and the optimizer step of "
       "those stages; scaled: a middle stage not run, modelled x the measured/modelled ratios of the stage run); "
       "MODELLED: every collective (exact bytes, the communication model), the pipeline's fill and drain (the 1F1B "
       "replay), the split of a pass into forward and backward\n";
  if (r.ranking.empty()) {
    t += "no candidate was measured\n";
  } else {
    t += fmt::format("{:>8}  ", "modelled") + ranked_header(true);
    for (size_t i = 0; i < r.ranking.size(); ++i) {
      const MeasuredCandidate& c = r.candidates[r.ranking[i]];
      t += fmt::format("{:>8}  ", c.modelled_rank) + ranked_row(*c.projected, static_cast<int>(i + 1), true);
    }
  }
  bool header = false;
  for (const MeasuredCandidate& c : r.candidates) {
    if (c.status == "measured") continue;
    if (!header) t += "not in the measured ranking:\n", header = true;
    t += fmt::format("  modelled rank {} {} ({}): {}: {}\n", c.modelled_rank, c.modelled.candidate.layout.describe(),
                     memory_settings_text(c.modelled.candidate), c.status == "failed" ? "FAILED" : "incomplete",
                     c.reason);
  }
  t += "per stage: compute ms per micro-batch (passes) and per step (optimizer), modelled vs measured (ratio: measured / "
       "modelled); memory: the plan's allocator peak and device total vs the run's allocator peak\n";
  for (const MeasuredCandidate& c : r.candidates) {
    t += fmt::format("  modelled rank {}: {} ({}), {}\n", c.modelled_rank, c.modelled.candidate.layout.describe(),
                     memory_settings_text(c.modelled.candidate), c.status);
    t += fmt::format("    {:>5} {:>5} {:<11} {:<10} {:>12} {:>12} {:>7} {:>12} {:>12} {:>7} {:>12} {:>12} {:>12}  {}\n",
                     "stage", "rank", "role", "run", "passes mod", "measured", "ratio", "optim mod", "measured", "ratio",
                     "plan peak", "plan total", "run peak", "directory");
    for (const MeasureRun& run : c.runs) {
      const tune::StageComputeSource& m = c.modelled.compute_sources[static_cast<size_t>(run.stage)];
      const bool have = run.status == "measured" || run.status == "reused";
      t += fmt::format("    {:>5} {:>5} {:<11} {:<10} {:>12} {:>12} {:>7} {:>12} {:>12} {:>7} {:>12} {:>12} {:>12}  {}\n",
                       run.stage, run.rank, run.role, run.status, ms(m.modelled_passes_per_micro_batch_s),
                       have ? ms(run.passes_per_micro_batch_s) : "-",
                       have ? ratio(run.passes_per_micro_batch_s, m.modelled_passes_per_micro_batch_s) : "-",
                       ms(m.modelled_optimizer_s), have ? ms(run.optimizer_s) : "-",
                       have ? ratio(run.optimizer_s, m.modelled_optimizer_s) : "-",
                       bytes_text(run.plan_allocator_peak_bytes), bytes_text(run.plan_device_bytes),
                       have ? bytes_text(run.peak_bytes) : "-", run.dir);
      if (run.status == "not run") t += "          not run: " + run.reason + "\n";
    }
    if (c.projected)
      for (size_t s = 0; s < c.projected->compute_sources.size(); ++s) {
        const tune::StageComputeSource& src = c.projected->compute_sources[s];
        if (src.source == "scaled")
          t += fmt::format("    stage {} (not run): scaled from stage {}: passes {} ms (modelled {}), optimizer {} ms "
                           "(modelled {})\n",
                           s, src.from_stage, ms(src.passes_per_micro_batch_s), ms(src.modelled_passes_per_micro_batch_s),
                           ms(src.optimizer_s), ms(src.modelled_optimizer_s));
      }
  }
  return t;
}

nlohmann::json measure_json(const MeasureResult& r) {
  nlohmann::json j;
  j["device"] = r.device;
  j["steps_per_run"] = r.steps;
  j["dir"] = r.dir;
  j["kept"] = r.kept;
  j["runs_started"] = r.started, j["runs_reused"] = r.reused, j["runs_failed"] = r.failed;
  j["seconds"] = r.seconds;
  nlohmann::json ranking = nlohmann::json::array();
  for (size_t i = 0; i < r.ranking.size(); ++i) {
    const MeasuredCandidate& c = r.candidates[r.ranking[i]];
    nlohmann::json e = ranked_json(*c.projected, static_cast<int>(i + 1));
    e["modelled_rank"] = c.modelled_rank;
    e["modelled_tokens_per_s_per_gpu"] = c.modelled.tokens_per_s_per_gpu;
    ranking.push_back(e);
  }
  j["ranked"] = ranking;
  nlohmann::json cands = nlohmann::json::array();
  for (const MeasuredCandidate& c : r.candidates) {
    nlohmann::json runs = nlohmann::json::array();
    for (const MeasureRun& run : c.runs) {
      const tune::StageComputeSource& m = c.modelled.compute_sources[static_cast<size_t>(run.stage)];
      const bool have = run.status == "measured" || run.status == "reused";
      nlohmann::json e = {{"stage", run.stage},
                          {"rank", run.rank},
                          {"role", run.role},
                          {"status", run.status},
                          {"dir", run.dir},
                          {"seconds", run.seconds},
                          {"argv", run.argv},
                          {"modelled", {{"source", "modelled"},
                                        {"compute_per_micro_batch_s", m.modelled_passes_per_micro_batch_s},
                                        {"optimizer_compute_s", m.modelled_optimizer_s},
                                        {"plan_allocator_peak_bytes", run.plan_allocator_peak_bytes},
                                        {"plan_device_bytes", run.plan_device_bytes}}}};
      if (have)
        e["measured"] = {{"source", "measured"},
                         {"compute_per_micro_batch_s", run.passes_per_micro_batch_s},
                         {"optimizer_compute_s", run.optimizer_s},
                         {"compute_ratio", m.modelled_passes_per_micro_batch_s > 0
                                               ? nlohmann::json(run.passes_per_micro_batch_s / m.modelled_passes_per_micro_batch_s)
                                               : nlohmann::json(nullptr)},
                         {"optimizer_ratio", m.modelled_optimizer_s > 0 ? nlohmann::json(run.optimizer_s / m.modelled_optimizer_s)
                                                                        : nlohmann::json(nullptr)},
                         {"peak_device_bytes", run.peak_bytes},
                         {"peak_is_gpu", run.gpu_peak},
                         {"device_used_bytes", run.device_used_bytes}};
      if (!run.reason.empty()) e["reason"] = run.reason;
      runs.push_back(e);
    }
    nlohmann::json e = {{"modelled_rank", c.modelled_rank},
                        {"layout", c.modelled.candidate.layout.describe()},
                        {"optimizer", optimizer_text(c.modelled.candidate.optimizer)},
                        {"recompute", c.modelled.candidate.recompute.describe()},
                        {"status", c.status},
                        {"modelled_tokens_per_s_per_gpu", c.modelled.tokens_per_s_per_gpu},
                        {"runs", runs}};
    if (!c.reason.empty()) e["reason"] = c.reason;
    if (c.projected) e["measured_tokens_per_s_per_gpu"] = c.projected->tokens_per_s_per_gpu;
    cands.push_back(e);
  }
  j["candidates"] = cands;
  j["definitions"] = {
      {"measured", "per measured stage: the compute of its passes per micro-batch and of the rest of its step (the "
                   "median over the run's measured steps: cli/simulated_run.h), and its allocator peak"},
      {"scaled", "a middle stage not run: its modelled compute times the measured/modelled ratios of the middle stage "
                 "run"},
      {"modelled", "every collective's time (exact bytes, docs/comm-model.md), the pipeline's fill and drain, the "
                   "forward/backward split of a pass; a stage of no measured role"}};
  return j;
}

}  // namespace quill::cli
