#include "cli/projection_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <map>

#include "base/error.h"
#include "base/file_util.h"
#include "cli/collectives_file.h"
#include "cli/simulated_run.h"
#include "parallel/grid.h"
#include "plan/projection.h"
#include "recipe/gpu_price.h"
#include "recipe/metrics.h"

namespace quill::cli {

void add_projection_flags(CLI::App* cmd, ProjectionFlags& f, bool workload) {
  const plan::CommModelParams h = plan::h200_comm_params();
  cmd->add_option("--gpus-per-node", f.gpus_per_node, "projection: GPUs per node (world ranks in consecutive blocks; default 8)");
  cmd->add_option("--nvlink-busbw-gbps,--intra-node-busbw-gbps", f.intra_busbw_gbps,
                  fmt::format("projection: bus bandwidth inside a node, GB/s (default {}: NVLink 4, published NCCL figure; "
                              "docs/comm-model.md)", h.intra_node.busbw_gbps));
  cmd->add_option("--internode-busbw-gbps,--inter-node-busbw-gbps", f.inter_busbw_gbps,
                  fmt::format("projection: bus bandwidth across nodes per GPU, GB/s (default {}: 400 Gb/s NDR)",
                              h.inter_node.busbw_gbps));
  cmd->add_option("--nvlink-latency-us,--intra-node-latency-us", f.intra_latency_us,
                  fmt::format("projection: latency of one collective inside a node, us (default {})", h.intra_node.latency_us));
  cmd->add_option("--internode-latency-us,--inter-node-latency-us", f.inter_latency_us,
                  fmt::format("projection: latency of one collective across nodes, us (default {})", h.inter_node.latency_us));
  cmd->add_option("--price-per-gpu-hour", f.price_per_gpu_hour,
                  "projection: USD per GPU-hour for $ per million tokens (default: quill's built-in price of the GPU "
                  "that measured, none on the CPU)");
  if (workload)
    cmd->add_option("--global-batch", f.global_batch, "the projected workload's rows per step (default: the runs')");
}

plan::CommModelParams comm_params(const ProjectionFlags& f) {
  plan::CommModelParams p = plan::h200_comm_params();
  std::vector<std::string> given;
  auto take = [&](const std::optional<double>& v, double& field, const char* flag) {
    if (!v) return;
    QUILL_CHECK(*v > 0 || (std::string(flag).find("latency") != std::string::npos && *v >= 0),
                "{} {}: must be positive", flag, *v);
    field = *v;
    given.push_back(fmt::format("{} {}", flag, *v));
  };
  take(f.intra_busbw_gbps, p.intra_node.busbw_gbps, "--nvlink-busbw-gbps");
  take(f.inter_busbw_gbps, p.inter_node.busbw_gbps, "--internode-busbw-gbps");
  take(f.intra_latency_us, p.intra_node.latency_us, "--nvlink-latency-us");
  take(f.inter_latency_us, p.inter_node.latency_us, "--internode-latency-us");
  QUILL_CHECK(f.gpus_per_node >= 1, "--gpus-per-node {}: must be at least 1", f.gpus_per_node);
  if (f.gpus_per_node != p.gpus_per_node) given.push_back(fmt::format("--gpus-per-node {}", f.gpus_per_node));
  p.gpus_per_node = f.gpus_per_node;
  if (!given.empty()) {
    std::string list;
    for (const std::string& g : given) list += (list.empty() ? "" : ", ") + g;
    p.source = "given on the command line: " + list + "; the rest: " + p.source;
  }
  return p;
}

namespace {

std::string gib(int64_t b) { return b < 0 ? "-" : fmt::format("{:.2f}", static_cast<double>(b) / (1 << 30)); }

// The stages of one projection must come from runs of one model, layout and workload, measured alike:
// the first field in which `b` differs from `a`, named with both values and both directories.
void check_same_job(const SimulatedRun& a, const SimulatedRun& b) {
  struct Field {
    const char* name;
    std::string in_a, in_b;
  };
  const Field fields[] = {
      {"summary.json active_params (the model)", std::to_string(a.active_params), std::to_string(b.active_params)},
      {"collectives.json layout", a.spec.describe(), b.spec.describe()},
      {"collectives.json layout_spec.order", a.spec.order, b.spec.order},
      {"collectives.json workload.global_batch", std::to_string(a.global_batch), std::to_string(b.global_batch)},
      {"collectives.json workload.row_tokens", std::to_string(a.row_tokens), std::to_string(b.row_tokens)},
      {"summary.json recompute", a.recompute, b.recompute},
      {"collectives.json device (what computed)", a.device, b.device},
      {"summary.json simulated_comm_time (timed stand-ins)", a.m.timed ? "true" : "false", b.m.timed ? "true" : "false"},
      {"collectives.json standin_comm_model", a.standin_comm ? comm_model_json(*a.standin_comm).dump() : "null",
       b.standin_comm ? comm_model_json(*b.standin_comm).dump() : "null"},
  };
  for (const Field& f : fields)
    QUILL_CHECK(f.in_a == f.in_b,
                "quill project: the runs differ in {}: {} in {}, {} in {}; give the stages of one model, layout and "
                "workload",
                f.name, f.in_a, a.dir, f.in_b, b.dir);
}

// Timed runs: per stage and group, the modelled time per step and the share the op profile saw beside compute.
std::string hidden_table(const plan::Projection& p, const std::vector<SimulatedRun>& runs) {
  std::string t = "  hidden per group (modelled ms per step; hidden: the group's share beside compute, as the run's op "
                  "profile or stand-in clock saw it)\n    stage  group      ms/step  hidden ms  hidden %\n";
  for (const plan::StageProjection& sp : p.stages) {
    if (sp.borrowed) continue;
    std::map<std::string, std::pair<double, double>> by_group;  // seconds, share (-1 unknown)
    for (const plan::GroupTime& g : sp.groups) {
      auto& [sec, share] = by_group.try_emplace(g.group, 0.0, g.hidden_share).first->second;
      sec += g.seconds;
    }
    for (const auto& [group, v] : by_group)
      t += v.second >= 0 ? fmt::format("    {:>5}  {:<8} {:>9.2f}  {:>9.2f}  {:>8.1f}\n", sp.stage, group, 1e3 * v.first,
                                       1e3 * v.first * v.second, 100 * v.second)
                         : fmt::format("    {:>5}  {:<8} {:>9.2f}  {:>9}  {:>8}\n", sp.stage, group, 1e3 * v.first, "-", "-");
  }
  bool profiled = std::any_of(runs.begin(), runs.end(), [](const SimulatedRun& r) { return !r.hidden_source.empty(); });
  if (!profiled)
    t += "    (no op profile or clock record in the runs: every group counted as exposed; on a GPU run with "
         "--profile-step N)\n";
  for (const SimulatedRun& r : runs)
    if (!r.hidden_source.empty()) t += "    rank " + std::to_string(r.m.rank) + ": hidden shares from " + r.hidden_source + "\n";
  return t;
}

}  // namespace

ProjectionReport project_runs(const std::vector<std::string>& dirs, const ProjectionFlags& flags) {
  QUILL_CHECK(!dirs.empty(), "quill project: give one or more run directories of quill train --simulate-rank");
  std::vector<SimulatedRun> runs;
  for (const std::string& d : dirs) runs.push_back(read_simulated_run(d));
  const SimulatedRun& first = runs.front();
  for (const SimulatedRun& r : runs) check_same_job(first, r);
  plan::ProjectionRequest q;
  q.spec = first.spec;
  for (const SimulatedRun& r : runs) q.ranks.push_back(r.m);
  const int64_t global_batch = flags.global_batch > 0 ? flags.global_batch : first.global_batch;
  QUILL_CHECK(global_batch % first.spec.dp == 0, "--global-batch {} does not split over {} data-parallel ranks",
              global_batch, first.spec.dp);
  q.micro_batches = global_batch / first.spec.dp;
  q.comm = comm_params(flags);
  if (first.standin_comm) {
    // The stand-ins took this model's time during the runs: the projection lays the step out on the same.
    const plan::CommModelParams& ran = *first.standin_comm;
    const bool same = q.comm.intra_node.busbw_gbps == ran.intra_node.busbw_gbps &&
                      q.comm.intra_node.latency_us == ran.intra_node.latency_us &&
                      q.comm.inter_node.busbw_gbps == ran.inter_node.busbw_gbps &&
                      q.comm.inter_node.latency_us == ran.inter_node.latency_us && q.comm.gpus_per_node == ran.gpus_per_node;
    const bool flags_given = flags.intra_busbw_gbps || flags.inter_busbw_gbps || flags.intra_latency_us ||
                             flags.inter_latency_us || flags.gpus_per_node != plan::h200_comm_params().gpus_per_node;
    QUILL_CHECK(same || !flags_given,
                "quill project: {} ran with timed stand-ins under its own communication model ({}); the flags give "
                "another ({}): project it without the model's flags, or rerun quill train --simulate-comm-time with them",
                first.dir, comm_model_json(ran).dump(), q.comm.source);
    q.comm = ran;
  }
  const plan::Projection p = plan::project_step(q);
  const int world = first.spec.world();

  // The recipe's formulas (docs/recipes-and-measurement.md §2) over the one projected step.
  MetricsInput in;
  in.step_times_s = {p.step_s};
  in.global_batch = global_batch;
  in.row_tokens = first.row_tokens;
  in.num_gpus = world;
  in.active_params = first.active_params;
  in.window = std::array<int64_t, 2>{0, 0};
  std::optional<GpuPrice> price;
  if (flags.price_per_gpu_hour) {
    QUILL_CHECK(*flags.price_per_gpu_hour > 0, "--price-per-gpu-hour {}: must be positive", *flags.price_per_gpu_hour);
    price = GpuPrice{*flags.price_per_gpu_hour, "the --price-per-gpu-hour flag"};
  } else {
    price = builtin_gpu_price(first.device);
  }
  in.usd_per_gpu_hour = price ? std::optional<double>(price->usd_per_gpu_hour) : std::nullopt;
  const RunMetrics metrics = compute_metrics(in);

  // What bounds the step: its largest parts.
  struct Part {
    std::string what;
    double s;
  };
  std::vector<Part> parts;
  const plan::StageProjection* slow = &p.stages[0];
  for (const plan::StageProjection& sp : p.stages) {
    if (sp.passes_compute_s > slow->passes_compute_s) slow = &sp;
    for (const plan::GroupTime& g : sp.groups)
      if (!sp.borrowed)
        parts.push_back({fmt::format("stage {} {} {} over {} ({}{})", sp.stage, g.phase, g.op, g.group, g.group_size,
                                     g.inter_node ? ", across nodes" : ""),
                         g.seconds});
  }
  parts.push_back({fmt::format("stage {} compute of the passes (measured)", slow->stage),
                   slow->passes_compute_s * static_cast<double>(q.micro_batches)});
  parts.push_back({"the pipeline's fill, drain and waits (modelled)", p.bubble_s});
  double opt_compute = 0;
  for (const plan::StageProjection& sp : p.stages) opt_compute = std::max(opt_compute, sp.optimizer_compute_s);
  parts.push_back({"the optimizer phase's compute (measured: gradient copies, update, offload)", opt_compute});
  std::sort(parts.begin(), parts.end(), [](const Part& a, const Part& b) { return a.s > b.s; });

  std::string t;
  t += fmt::format("projection of {} ({} GPUs, {} per node): {} rows x {} tokens per step, {} micro-batches per pipeline\n",
                   first.spec.describe(), world, q.comm.gpus_per_node, global_batch, first.row_tokens, q.micro_batches);
  t += "  stage  rank  compute ms/mb  comm ms/mb  msg ms  pipeline ms  opt compute ms  opt comm ms  peak GiB  GB/step\n";
  std::map<int, const SimulatedRun*> by_rank;
  for (const SimulatedRun& r : runs) by_rank[r.m.rank] = &r;
  nlohmann::json stages = nlohmann::json::array();
  for (const plan::StageProjection& sp : p.stages) {
    const SimulatedRun* r = by_rank.at(sp.from_rank);
    int64_t bytes = 0;
    for (const plan::GroupTime& g : sp.groups) bytes += g.wire_bytes;
    t += fmt::format("  {:>5}  {:>4}{} {:>13.3f}  {:>10.3f}  {:>6.3f}  {:>11.1f}  {:>14.1f}  {:>11.1f}  {:>8}  {:>7.2f}\n",
                     sp.stage, sp.from_rank, sp.borrowed ? "*" : " ", 1e3 * sp.passes_compute_s, 1e3 * sp.passes_comm_s,
                     1e3 * sp.message_s, 1e3 * sp.pipeline_end_s, 1e3 * sp.optimizer_compute_s,
                     1e3 * sp.optimizer_comm_s, gib(r->peak_bytes), static_cast<double>(bytes) / 1e9);
    nlohmann::json groups = nlohmann::json::array();
    for (const plan::GroupTime& g : sp.groups)
      groups.push_back({{"phase", g.phase}, {"group", g.group}, {"group_size", g.group_size}, {"op", g.op},
                        {"inter_node", g.inter_node}, {"calls_per_step", g.calls}, {"wire_bytes_per_step", g.wire_bytes},
                        {"seconds_per_step", g.seconds},
                        {"hidden_share", g.hidden_share >= 0 ? nlohmann::json(g.hidden_share) : nlohmann::json(nullptr)}});
    stages.push_back({{"stage", sp.stage}, {"from_rank", sp.from_rank}, {"borrowed", sp.borrowed},
                      {"run_dir", r->dir},
                      {"compute_per_micro_batch_s", sp.passes_compute_s}, {"comm_per_micro_batch_s", sp.passes_comm_s},
                      {"forward_s", sp.forward_s}, {"backward_s", sp.backward_s}, {"message_s", sp.message_s},
                      {"pipeline_comm_s", sp.pipeline_comm_s}, {"pipeline_end_s", sp.pipeline_end_s},
                      {"optimizer_compute_s", sp.optimizer_compute_s}, {"optimizer_comm_s", sp.optimizer_comm_s},
                      {"comm_hidden_per_micro_batch_s", sp.passes_hidden_s}, {"optimizer_comm_hidden_s", sp.optimizer_hidden_s},
                      {"hidden_from", r->hidden_source.empty() ? nlohmann::json(nullptr) : nlohmann::json(r->hidden_source)},
                      {"loopback_per_micro_batch_s",
                       r->loopback_measured ? nlohmann::json(r->loopback_passes_s / static_cast<double>(r->m.micro_batches))
                                            : nlohmann::json(nullptr)},
                      {"loopback_rest_s", r->loopback_measured ? nlohmann::json(r->loopback_rest_s) : nlohmann::json(nullptr)},
                      {"peak_device_bytes", r->peak_bytes}, {"peak_is_gpu", r->gpu_peak}, {"wire_bytes_per_step", bytes},
                      {"groups", groups}});
  }
  if (std::any_of(p.stages.begin(), p.stages.end(), [](const plan::StageProjection& s) { return s.borrowed; }))
    t += "  * not measured: a like stage's figures (simulate a rank of it for its own)\n";
  t += "  compute is the measured time less the loopback's copies (they stand in for the collectives modelled here):";
  for (const SimulatedRun& r : runs)
    t += r.loopback_measured
             ? fmt::format(" rank {} {:.3f} ms/mb and {:.1f} ms of the rest;", r.m.rank,
                           1e3 * r.loopback_passes_s / static_cast<double>(r.m.micro_batches), 1e3 * r.loopback_rest_s)
             : fmt::format(" rank {} not timed (a run of an older quill: its copies stay in);", r.m.rank);
  t.back() = '\n';
  if (p.timed) {
    t += fmt::format("  step {:.3f} s = pipeline {:.3f} s + optimizer phase {:.3f} s, from the passes as measured with timed "
                     "stand-ins (each collective its modelled time, beside compute where the run overlaps it); with "
                     "none overlapped {:.3f} s\n",
                     p.step_s, p.pipeline_s, p.optimizer_s, p.none_overlapped_step_s);
    t += fmt::format("  of it compute {:.3f} s, communication {:.3f} s modelled of which {:.3f} s hidden ({:.1f}%) and "
                     "{:.3f} s exposed, fill/drain/waits {:.3f} s ((pp-1)/m = {:.3f})\n",
                     p.compute_s, p.modelled_comm_s, p.hidden_comm_s,
                     p.modelled_comm_s > 0 ? 100 * p.hidden_comm_s / p.modelled_comm_s : 0.0, p.exposed_comm_s, p.bubble_s,
                     p.bubble_fraction_formula);
    t += hidden_table(p, runs);
  } else {
    t += fmt::format("  step {:.3f} s = pipeline {:.3f} s + optimizer phase {:.3f} s; of it compute {:.3f} s (measured), "
                     "communication {:.3f} s (modelled, none overlapped), fill/drain/waits {:.3f} s (modelled; (pp-1)/m = {:.3f})\n",
                     p.step_s, p.pipeline_s, p.optimizer_s, p.compute_s, p.exposed_comm_s, p.bubble_s,
                     p.bubble_fraction_formula);
  }
  t += fmt::format("  {:.2f} tokens/s/GPU, MFU {:.2f}% (6N, N = {}, 989 TFLOP/s)", metrics.tokens_per_s_per_gpu,
                   100 * metrics.mfu, first.active_params);
  if (metrics.usd_per_million_tokens)
    t += fmt::format(", ${:.2f} per million tokens at ${:.3f} per GPU-hour ({})", *metrics.usd_per_million_tokens,
                     price->usd_per_gpu_hour, price->source);
  else
    t += ", no $ figure (no price for this device: --price-per-gpu-hour)";
  t += "\n  bounded by: ";
  for (size_t i = 0; i < std::min<size_t>(3, parts.size()); ++i)
    t += fmt::format("{}{} {:.3f} s", i ? "; " : "", parts[i].what, parts[i].s);
  t += "\n  comm model: " + q.comm.source + "\n";
  for (const std::string& n : p.notes) t += "  note: " + n + "\n";

  ProjectionReport rep;
  rep.text = t;
  nlohmann::json& j = rep.json;
  j["format"] = "quill-projection-1";
  j["layout"] = first.spec.describe();
  j["layout_spec"] = layout_spec_json(first.spec);
  j["world_size"] = world;
  j["workload"] = {{"global_batch", global_batch}, {"row_tokens", first.row_tokens}, {"micro_batches", q.micro_batches}};
  j["measured_on"] = first.device;
  j["step_s"] = p.step_s;
  j["pipeline_s"] = p.pipeline_s;
  j["optimizer_phase_s"] = p.optimizer_s;
  j["compute_s"] = p.compute_s;
  j["exposed_comm_s"] = p.exposed_comm_s;
  j["fill_drain_wait_s"] = p.bubble_s;
  j["timed_standins"] = p.timed;
  j["none_overlapped_step_s"] = p.none_overlapped_step_s;
  j["modelled_comm_s"] = p.modelled_comm_s;
  j["hidden_comm_s"] = p.hidden_comm_s;
  j["bubble_fraction_formula"] = p.bubble_fraction_formula;
  j["metrics"] = metrics.to_json();
  j["usd_per_gpu_hour_source"] = price ? nlohmann::json(price->source) : nlohmann::json(nullptr);
  j["stages"] = stages;
  nlohmann::json bound = nlohmann::json::array();
  for (const Part& part : parts) bound.push_back({{"what", part.what}, {"seconds_per_step", part.s}});
  j["bounded_by"] = bound;
  j["comm_model"] = comm_model_json(q.comm);
  j["notes"] = p.notes;
  j["definitions"] = {
      {"measured", "per stage: compute of the passes per micro-batch and of the rest of the step (the simulated rank's "
                   "summary.json medians less its loopback's copies, collectives.json loopback_copy_s: they stand in "
                   "for the collectives modelled here), peak memory, and the bytes of every collective "
                   "(collectives.json)"},
      {"loopback_per_micro_batch_s", "per stage: the run's loopback copies per micro-batch of its passes (and "
                                      "loopback_rest_s per step of the rest), taken off its measured compute; null: "
                                      "a run of a quill before they were timed, nothing taken off"},
      {"modelled", "the time of every collective (docs/comm-model.md: bytes / bus bandwidth + calls x latency), the "
                   "1F1B pipeline's fill, drain and waits (the schedule replayed), stages not simulated (a like stage's "
                   "figures)"},
      {"timed_standins", "false: the runs' collectives took no time, and every collective is laid on the critical path "
                         "(none overlapped); true: each took its modelled time beside the compute during the runs "
                         "(quill train --simulate-comm-time), step_s is laid out from the passes as measured and "
                         "none_overlapped_step_s from the same compute with every collective exposed"},
      {"hidden_comm_s", "of the critical stage's modelled communication per step (modelled_comm_s), the part that ran "
                        "beside compute: each group's time times its hidden share in the run's op profile "
                        "(op_profile_step{N}.json collectives; groups without a profile count as exposed)"},
      {"metrics", "recipe formulas over the projected step: tokens_per_s_per_gpu = global_batch x row_tokens / step_s / "
                  "world; mfu = 6 N tokens_per_s_per_gpu / 989e12; usd_per_million_tokens = price / (tokens/s/GPU x 3600) "
                  "x 1e6"}};
  return rep;
}

void write_projection(const std::string& out_dir, const ProjectionReport& report) {
  write_file_atomic(out_dir + "/projection.json", report.json.dump(1) + "\n");
}

}  // namespace quill::cli
