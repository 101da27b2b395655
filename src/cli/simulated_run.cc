#include "cli/simulated_run.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "base/error.h"
#include "base/file_util.h"
#include "cli/collectives_file.h"
#include "parallel/grid.h"

namespace quill::cli {

namespace {

nlohmann::json read_json(const std::string& path) {
  QUILL_CHECK(path_exists(path), "{}: not found (a run directory of quill train --simulate-rank holds it)", path);
  try {
    return nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::exception& e) {
    QUILL_FAIL("{}: not JSON: {}", path, e.what());
  }
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The op profile of the profiled step (the lead rank's file, else the rank's own): per group, of its
// collectives' time on their streams, the share while the compute stream ran ops (ops/comm_profile.h).
void read_hidden_shares(const std::string& dir, int64_t profiled, SimulatedRun& run) {
  if (profiled < 0) return;
  std::string path = dir + "/op_profile_step" + std::to_string(profiled) + ".json";
  if (!path_exists(path)) path = dir + "/op_profile_step" + std::to_string(profiled) + ".rank" + std::to_string(run.m.rank) + ".json";
  if (!path_exists(path)) return;
  const nlohmann::json p = read_json(path);
  if (!p.contains("collectives")) return;
  std::map<std::string, std::pair<double, double>> by_group;  // comm ms, hidden ms
  try {
    for (const nlohmann::json& row : p.at("collectives")) {
      auto& [comm, hidden] = by_group[row.at("group").get<std::string>()];
      comm += row.at("comm_ms").get<double>();
      hidden += row.at("hidden_ms").get<double>();
    }
  } catch (const nlohmann::json::exception& e) {
    QUILL_FAIL("{}: collectives: {}", path, e.what());
  }
  for (const auto& [group, t] : by_group)
    if (t.first > 0) run.m.hidden_share[group] = std::clamp(t.second / t.first, 0.0, 1.0);
  run.hidden_source = path;
}

}  // namespace

namespace {

// A step's loopback copies, in its passes and in the rest (collectives.json loopback_copy_s).
struct LoopbackSteps {
  double passes_s = 0, rest_s = 0;
};

// loopback_copy_s by step: absent or null (a run of a quill before they were timed) gives none; anything else must be
// an array of {step, phase, seconds} with finite seconds >= 0 (a quill::Error naming the file and the entry).
std::map<int64_t, LoopbackSteps> loopback_by_step(const nlohmann::json& c, const std::string& cpath) {
  std::map<int64_t, LoopbackSteps> out;
  if (!c.contains("loopback_copy_s") || c.at("loopback_copy_s").is_null()) return out;
  const nlohmann::json& all = c.at("loopback_copy_s");
  QUILL_CHECK(all.is_array(), "{}: loopback_copy_s is {}, not an array of {{step, phase, seconds}}", cpath, all.dump());
  for (const nlohmann::json& t : all) {
    const std::string phase = t.at("phase");
    const double seconds = t.at("seconds");
    QUILL_CHECK(std::isfinite(seconds) && seconds >= 0, "{}: loopback_copy_s entry {} has seconds {}", cpath, t.dump(),
                seconds);
    LoopbackSteps& step = out[t.at("step").get<int64_t>()];
    if (phase == "passes") step.passes_s += seconds;
    if (phase == "optimizer") step.rest_s += seconds;
  }
  return out;
}

// One step's compute (the loopback's copies taken off) and those copies.
struct StepFigures {
  double passes_s, rest_s, loopback_passes_s, loopback_rest_s;
};

}  // namespace

SimulatedRun read_simulated_run(const std::string& dir) {
  SimulatedRun run;
  run.dir = dir;
  const std::string cpath = dir + "/collectives.json", spath = dir + "/summary.json";
  const nlohmann::json c = read_json(cpath), s = read_json(spath);
  try {
    QUILL_CHECK(c.at("format") == "quill-collectives-2", "{}: format {} (this quill reads quill-collectives-2)", cpath,
                c.at("format").dump());
    QUILL_CHECK(!c.at("simulated_rank").is_null(),
                "{}: a real run's collectives (simulated_rank null); a projection starts from quill train --simulate-rank "
                "runs, whose step times are compute only",
                cpath);
    run.spec = layout_spec_from_json(c.at("layout_spec"), cpath);
    run.global_batch = c.at("workload").at("global_batch");
    run.row_tokens = c.at("workload").at("row_tokens");
    run.device = c.value("device", std::string());
    const int rank = c.at("simulated_rank");
    run.m.rank = rank;
    const nlohmann::json& entry = c.at("ranks").at(0);
    QUILL_CHECK(entry.at("rank") == rank, "{}: ranks[0] is rank {}, not the simulated rank {}", cpath,
                entry.at("rank").dump(), rank);
    for (const auto& [name, ranks] : entry.at("groups").items()) run.m.groups[name] = ranks.get<std::vector<int>>();
    // The world communicator is every rank (collectives.json lists the layout's groups only).
    std::vector<int> everyone(static_cast<size_t>(c.at("world_size").get<int>()));
    for (size_t i = 0; i < everyone.size(); ++i) everyone[i] = static_cast<int>(i);
    run.m.groups.emplace("world", everyone);
    const std::vector<CollectiveRow> rows = collective_rows_from_json(entry.at("rows"), cpath);
    // The loopback's copies per step: they stand in for communication the projection models.
    const std::map<int64_t, LoopbackSteps> loopback = loopback_by_step(c, cpath);
    run.loopback_measured = c.contains("loopback_copy_s") && !c.at("loopback_copy_s").is_null();
    // The measured steps, as summary.json's median takes them: steps >= warmup_steps, the profiled one out.
    const int64_t warmup = s.at("warmup_steps"), profiled = s.at("profile_step");
    std::vector<StepFigures> all, kept;
    std::vector<int64_t> measured, all_steps;
    for (const nlohmann::json& st : s.at("per_step")) {
      const int64_t step = st.at("step");
      const double t = st.at("step_time_s"), p = st.at("passes_time_s");
      const auto it = loopback.find(step);
      const LoopbackSteps copies = it == loopback.end() ? LoopbackSteps{} : it->second;
      QUILL_CHECK(copies.passes_s <= p, "{}: loopback_copy_s gives step {}'s passes {} s of copies, more than their {} s "
                  "in {}", cpath, step, copies.passes_s, p, spath);
      const StepFigures f{p - copies.passes_s, t - p - copies.rest_s, copies.passes_s, copies.rest_s};
      all.push_back(f), all_steps.push_back(step);
      if (step >= warmup && step != profiled) kept.push_back(f), measured.push_back(step);
    }
    QUILL_CHECK(!all_steps.empty(), "{}: per_step is empty", spath);
    if (measured.empty()) kept = all, measured = all_steps;
    auto median_of = [&](double StepFigures::*field) {
      std::vector<double> v;
      for (const StepFigures& f : kept) v.push_back(f.*field);
      return median(v);
    };
    run.m.passes_s = median_of(&StepFigures::passes_s);
    run.m.rest_s = std::max(0.0, median_of(&StepFigures::rest_s));
    run.loopback_passes_s = median_of(&StepFigures::loopback_passes_s);
    run.loopback_rest_s = median_of(&StepFigures::loopback_rest_s);
    for (const CollectiveRow& r : rows)
      if (std::find(measured.begin(), measured.end(), r.step) != measured.end()) run.m.rows.push_back(r);
    run.m.steps = static_cast<int64_t>(measured.size());
    run.active_params = s.at("active_params");
    run.recompute = s.value("recompute", std::string());
    // A step with timed stand-ins already holds its collectives' exposed time, under the model it ran with.
    run.m.timed = s.value("simulated_comm_time", false);
    if (run.m.timed) {
      QUILL_CHECK(c.contains("standin_comm_model") && c.at("standin_comm_model").is_object(),
                  "{}: summary.json says simulated_comm_time, but standin_comm_model is missing (a run of an older quill: "
                  "rerun it)",
                  cpath);
      run.standin_comm = comm_model_from_json(c.at("standin_comm_model"), cpath + " standin_comm_model");
      read_hidden_shares(dir, profiled, run);
      // No op profile (the CPU has no profiler): the host clock's record of the whole run, when there is one.
      if (run.hidden_source.empty() && c.contains("standin_overlap") && c.at("standin_overlap").is_object()) {
        for (const auto& [group, t] : c.at("standin_overlap").items()) {
          const double comm = t.at("comm_s"), hidden = t.at("hidden_s");
          if (comm > 0) run.m.hidden_share[group] = std::clamp(hidden / comm, 0.0, 1.0);
        }
        run.hidden_source = cpath + " standin_overlap";
      }
    }
    if (s.contains("peak_device_bytes_per_rank")) run.peak_bytes = s.at("peak_device_bytes_per_rank").at(rank);
    run.gpu_peak = s.at("peak_gpu_bytes").get<int64_t>() >= 0;
    run.device_used_bytes = s.value("device_used_bytes_end", int64_t{-1});
  } catch (const nlohmann::json::exception& e) {
    QUILL_FAIL("{} or {}: {}", cpath, spath, e.what());
  }
  QUILL_CHECK(run.global_batch > 0 && run.global_batch % run.spec.dp == 0,
              "{}/collectives.json: workload.global_batch {} does not split over {} data-parallel ranks", dir,
              run.global_batch, run.spec.dp);
  run.m.micro_batches = run.global_batch / run.spec.dp;
  run.m.stage = Grid(run.spec.world(), run.spec).coords(run.m.rank).pp;
  return run;
}

}  // namespace quill::cli
