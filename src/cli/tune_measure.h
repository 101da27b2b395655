// `quill tune --measure K` (docs/tune.md): the K best layouts of the modelled ranking measured with real
// kernels. For each, one rank of each stage role (tune::stages_to_measure: first, middle, last) runs as
// `quill train --simulate-rank R` (docs/simulate-rank.md) with exactly the layout's flags, random weights
// and synthetic rows of the workload's length, each in a child process of this same executable (its device
// memory freed when it ends; a crash, an out-of-memory or a refusal ends that child only). The runs'
// measured compute (cli/simulated_run.h: the passes per micro-batch, the rest of the step) replaces the
// modelled compute of those stages; the communication stays modelled; the same projection
// (tune::project_candidate, plan/projection.h) re-ranks the measured ones. A candidate with a failed run
// is reported with the reason and left out of the measured ranking.
//
// Run directories live in --measure-dir (else a temporary directory, removed at the end), each with a key
// file (measure-key.json: the model's bytes, the rows and every flag of the run): a later --measure whose
// run has the same key reuses its directory instead of running it again.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tune/rank_layouts.h"

namespace quill::cli {

struct MeasureOptions {
  int candidates = 0;        // K: the first K of the modelled ranking
  int steps = 2;             // per run; the first is left out of the medians as a warm-up when steps > 1
  std::string device;        // "cpu" | "cuda": the children's --device
  std::string dir;           // kept run directories; empty: a temporary directory, removed at the end
  std::string model;         // the model's config.json (or its directory), as quill tune read it
  std::string device_memory; // the children's --device-memory (empty: none given; a GPU's own total)
  double timeout_s = 0;      // per run; 0: none
  // --measure-only C[:S]: only these runs (candidate C of the modelled ranking, its stage S; S < 0: all
  // its stages); every other run is reused when --measure-dir holds it, else not run.
  std::vector<std::pair<int, int>> only;
  std::string quill;         // the executable the children run (this one: self_executable())
};

// One child run: a stage's rank of a candidate.
struct MeasureRun {
  int stage = 0, rank = 0;
  std::string role;
  std::string dir, log;
  std::string status;        // "measured" | "reused" | "failed" | "not run"
  std::string reason;        // failed or not run: why (the child's error line, its exit status, the log)
  double seconds = 0;        // the child's wall time (0 when reused or not run)
  std::vector<std::string> argv;  // the child's command line
  // Measured (measured or reused):
  double passes_per_micro_batch_s = 0, optimizer_s = 0;
  int64_t peak_bytes = -1, device_used_bytes = -1;
  bool gpu_peak = false;
  // The plan's prediction for its stage.
  int64_t plan_allocator_peak_bytes = -1, plan_device_bytes = -1;
};

struct MeasuredCandidate {
  int modelled_rank = 0;         // 1-based place in the modelled ranking
  tune::RankedLayout modelled;
  std::vector<MeasureRun> runs;  // one per stage of tune::stages_to_measure
  std::string status;            // "measured" | "failed" | "incomplete" (a run not run: --measure-only)
  std::string reason;
  std::optional<tune::RankedLayout> projected;  // measured: the projection with the measured compute
};

struct MeasureResult {
  std::vector<MeasuredCandidate> candidates;  // in modelled order
  std::vector<size_t> ranking;                // indices of the measured candidates, best first
  std::string dir;                            // where the runs were (removed at the end unless kept)
  bool kept = false;                          // dir stays (--measure-dir)
  int started = 0, reused = 0, failed = 0;    // runs
  double seconds = 0;
  std::string device;
  int steps = 0;
};

// Parses --measure-only's "C" or "C:S" (C >= 1, S >= 0); throws naming the flag.
std::pair<int, int> parse_measure_only(const std::string& text);

// Measures the first o.candidates of `ranked` (best first, as tune::rank_layouts returns them), printing
// progress to stderr, and re-projects the measured ones with `request`.
MeasureResult measure_candidates(const std::vector<tune::RankedLayout>& ranked, const tune::RankRequest& request,
                                 const MeasureOptions& o);

// The measured ranking (the compute column marks every figure's source), the failures with their reasons,
// and per candidate and stage the modelled against the measured compute and the plan's peak against the
// measured one.
std::string measure_text(const MeasureResult& result);
nlohmann::json measure_json(const MeasureResult& result);

}  // namespace quill::cli
