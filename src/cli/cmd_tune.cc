// `quill tune`: the layouts of a model on a number of GPUs, those that fit (quill plan), ranked by their
// projected tokens/s/GPU (modelled compute and exact modelled collective bytes through the communication
// model), with the reasons for what was refused and how the search was pruned (docs/tune.md).
#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>

#include "base/child_process.h"
#include "base/error.h"
#include "base/timer.h"
#include "base/writable_dir.h"
#include "cli/commands.h"
#include "cli/count_flags.h"
#include "cli/launch.h"
#include "cli/memory_flags.h"
#include "cli/projection_report.h"
#include "cli/tune_measure.h"
#include "cli/tune_report.h"
#include "model/params.h"
#include "plan/memory_plan.h"
#include "plan/plan_report.h"
#include "recipe/metrics.h"
#include "recipe/run_recipe.h"
#include "tune/emit_recipe.h"
#include "tune/rank_layouts.h"

namespace quill::cli {

namespace {

// Overrides of the compute rates from a JSON object of ComputeRates' field names.
tune::ComputeRates rates_with(const std::string& path, tune::ComputeRates r) {
  std::ifstream in(path);
  QUILL_CHECK(in.good(), "--compute-rates {}: cannot read the file", path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    QUILL_FAIL("--compute-rates {}: {}", path, e.what());
  }
  QUILL_CHECK(j.is_object(), "--compute-rates {}: expected a JSON object of rates", path);
  const std::pair<const char*, double*> fields[] = {
      {"dense_gemm_tflops", &r.dense_gemm_tflops},
      {"grouped_gemm_tflops", &r.grouped_gemm_tflops},
      {"attention_global_fwd_tflops", &r.attention_global_fwd_tflops},
      {"attention_global_bwd_tflops", &r.attention_global_bwd_tflops},
      {"attention_local_fwd_tflops", &r.attention_local_fwd_tflops},
      {"attention_local_bwd_tflops", &r.attention_local_bwd_tflops},
      {"loss_gbps", &r.loss_gbps},
      {"region_ms_per_row_layer", &r.region_ms_per_row_layer},
      {"split_ms_per_row_layer", &r.split_ms_per_row_layer},
      {"gaps_ms_per_row_layer", &r.gaps_ms_per_row_layer},
      {"adamw_gbps", &r.adamw_gbps},
      {"sum_squares_gbps", &r.sum_squares_gbps},
      {"host_adamw_gelements_per_s", &r.host_adamw_gelements_per_s},
      {"pcie_gbps", &r.pcie_gbps}};
  for (const auto& [key, value] : j.items()) {
    if (key == "source") {
      r.source = value.get<std::string>();
      continue;
    }
    if (key == "grouped_rate_by_rows_per_expert") {
      // [[rows, factor], ...], rows ascending, the last factor 1 (tune/compute_model.h).
      r.grouped_rate_by_rows.clear();
      QUILL_CHECK(value.is_array(), "--compute-rates {}: {} must be a list of [rows per expert, factor]", path, key);
      for (const nlohmann::json& point : value) {
        QUILL_CHECK(point.is_array() && point.size() == 2 && point[0].is_number() && point[1].is_number() &&
                        point[0].get<double>() > 0 && point[1].get<double>() > 0,
                    "--compute-rates {}: {}: each point is [rows per expert > 0, factor > 0], got {}", path, key,
                    point.dump());
        QUILL_CHECK(r.grouped_rate_by_rows.empty() || point[0].get<double>() > r.grouped_rate_by_rows.back().first,
                    "--compute-rates {}: {}: rows per expert must ascend", path, key);
        r.grouped_rate_by_rows.emplace_back(point[0].get<double>(), point[1].get<double>());
      }
      QUILL_CHECK(value.empty() || r.grouped_rate_by_rows.back().second == 1.0,
                  "--compute-rates {}: {}: the last point is grouped_gemm_tflops' own (factor 1)", path, key);
      continue;
    }
    if (key == "reference_tokens" || key == "reference_hidden") {
      (key == "reference_tokens" ? r.reference_tokens : r.reference_hidden) = value.get<int64_t>();
      continue;
    }
    QUILL_CHECK(key != "host_adamw_gbps",
                "--compute-rates {}: host_adamw_gbps is now host_adamw_gelements_per_s (G elements a second: the host "
                "update is bound by its arithmetic, not its bytes)",
                path);
    bool known = false;
    for (const auto& [name, field] : fields)
      if (key == name) {
        QUILL_CHECK(value.is_number() && value.get<double>() >= 0, "--compute-rates {}: {} must be a number >= 0",
                    path, key);
        *field = value.get<double>();
        known = true;
      }
    QUILL_CHECK(known, "--compute-rates {}: unknown rate '{}'", path, key);
  }
  // A grouped GEMM rate measured elsewhere (another device) does not take the H200's dependence on rows.
  if (j.contains("grouped_gemm_tflops") && !j.contains("grouped_rate_by_rows_per_expert")) r.grouped_rate_by_rows.clear();
  if (!j.contains("source")) r.source = "given in " + path;
  return r;
}

// --emit-recipe FILE, before the search (which can take minutes): a new file, or with --overwrite an existing
// one, in a directory where a file can be created. The recipe itself is written to a temporary name and
// renamed (recipe/recipe.h: write_recipe), so an old FILE stays whole until the new one is complete.
void check_emit_target(const std::string& path, bool overwrite) {
  namespace fs = std::filesystem;
  std::error_code ec;
  QUILL_CHECK(!fs::is_directory(path, ec), "--emit-recipe {}: is a directory; give a file name (e.g. {}/recipe.yaml)", path,
              fs::path(path).lexically_normal().string());
  QUILL_CHECK(overwrite || !fs::exists(path, ec),
              "--emit-recipe {}: exists; give --overwrite to replace it, or another file name", path);
  const fs::path dir = fs::absolute(path).parent_path();
  QUILL_CHECK(fs::is_directory(dir, ec), "--emit-recipe {}: the directory {} does not exist", path, dir.string());
  check_dir_writable("--emit-recipe", path, dir.string());
}

}  // namespace

void add_tune_command(CLI::App& app, Runner& run) {
  CLI::App* cmd = app.add_subcommand(
      "tune", "choose the layout for a model on a number of GPUs: every layout that fits, ranked by projected tokens/s/GPU");
  static std::string model, gpu = "h200", device_memory, host_memory, emit, rates_path, freeze_preset = "miles",
                     launcher = "srun";
  static std::vector<std::string> freeze, compare;
  static int gpus = 0, top = 10;
  static int64_t row_tokens = 8192, global_batch = 128, max_imbalance = 3;
  static bool json = false, cross_node_ep = false, overwrite = false;
  static ProjectionFlags pflags;
  static int measure = 0, measure_steps = 2;
  static std::string measure_device, measure_dir, measure_device_memory;
  static std::vector<std::string> measure_only;
  static double measure_timeout = 0;
  cmd->add_option("--model", model, "config.json of the model (or a directory holding it)")->required();
  cmd->add_option("--gpus", gpus, "GPUs (world ranks) to lay the model out on")->required();
  cmd->add_option("--gpu", gpu, "h200 (bf16, 141 GiB, the H200 rates and NVLink/NDR figures; default) | cpu (fp32 "
                                "CPU ranks: give --compute-rates, --device-memory and the MPI figures)");
  cmd->add_option("--row-tokens", row_tokens, "tokens per row, one row per micro-batch (default 8192)");
  cmd->add_option("--global-batch", global_batch, "rows per optimizer step (default 128)");
  cmd->add_option("--top", top, "layouts to print (default 10)");
  cmd->add_flag("--json", json, "print every ranked layout, the refusals and the pruning as JSON");
  cmd->add_option("--emit-recipe", emit, "write the best layout as a recipe (the seed's format) that quill run accepts");
  cmd->add_flag("--overwrite", overwrite, "with --emit-recipe: replace an existing FILE");
  cmd->add_option("--launcher", launcher,
                  "with --emit-recipe: the run block's launcher: srun (an sbatch script, default) | mpirun");
  cmd->add_flag("--allow-cross-node-ep", cross_node_ep, "let expert-parallel groups span nodes (default: inside a node)");
  cmd->add_option("--max-split-imbalance", max_imbalance,
                  "uneven pipeline splits: first and last stages within this many layers of the middle ones (default 3)");
  cmd->add_option("--compute-rates", rates_path, "JSON object overriding the modelled compute rates (docs/tune.md)");
  cmd->add_option("--compare", compare, "a recipe whose layout, offload and recompute to project and place in the "
                                        "ranking (repeatable)");
  cmd->add_option("--freeze", freeze, "freeze parameters matching this glob (repeatable)");
  cmd->add_option("--freeze-preset", freeze_preset, "miles (relative-bias tables and global scales; default) | none");
  add_device_memory_flag(cmd, device_memory);
  cmd->add_option("--host-memory", host_memory,
                  "memory of each node's host, e.g. 2TiB: layouts whose ranks of a node need more than 90% of it at "
                  "startup (offloaded optimizer state, weights before placement) are refused, as quill train refuses "
                  "them (default: not checked)");
  add_projection_flags(cmd, pflags, /*workload=*/false);
  cmd->add_option("--measure", measure,
                  "measure the K best layouts: one rank per stage role of each as quill train --simulate-rank (real "
                  "kernels, random weights, synthetic rows) in a child process; re-rank them by the measured compute "
                  "(docs/tune.md)");
  cmd->add_option("--measure-steps", measure_steps, "with --measure: steps per run, the first a warm-up (default 2)");
  cmd->add_option("--measure-device", measure_device,
                  "with --measure: cuda | cpu (default: cuda when a GPU is visible, else cpu)");
  cmd->add_option("--measure-dir", measure_dir,
                  "with --measure: keep the run directories here; a later --measure reuses those whose layout and "
                  "flags match (default: a temporary directory, removed)");
  cmd->add_option("--measure-only", measure_only,
                  "with --measure: run only candidate C (its modelled rank) or its stage S (C:S, repeatable); the other "
                  "runs are reused from --measure-dir or left out");
  cmd->add_option("--measure-timeout", measure_timeout, "with --measure: seconds a run may take before it is killed "
                                                        "and reported failed (default 0: no limit)");
  cmd->add_option("--measure-device-memory", measure_device_memory,
                  "with --measure: the runs' --device-memory (default: --device-memory when given, else the device's "
                  "own)");
  cmd->callback([&run] {
    run = [] {
      Timer timer;
      QUILL_CHECK(gpu == "h200" || gpu == "cpu", "--gpu {}: quill tune knows h200 and cpu", gpu);
      check_positive("--top", top);
      check_not_negative("--max-split-imbalance", static_cast<double>(max_imbalance));
      check_not_negative("--measure-timeout", measure_timeout);
      const bool on_gpu = gpu == "h200";
      if (!emit.empty()) check_emit_target(emit, overwrite);  // refused before the search, not after it
      const tune::Launcher emit_launcher = tune::parse_launcher("--launcher", launcher);
      const bool measuring = measure > 0;
      QUILL_CHECK(measuring || (measure_dir.empty() && measure_only.empty() && measure_device.empty()),
                  "--measure-dir, --measure-only and --measure-device need --measure K");
      QUILL_CHECK(measure >= 0, "--measure {}: the number of candidates to measure (0: none)", measure);
      MeasureOptions mo;
      if (measuring) {  // refused before the search, not after it
        mo.candidates = measure;
        mo.steps = measure_steps;
        mo.device = measure_device.empty() ? default_device() : measure_device;
        mo.dir = measure_dir;
        mo.model = model;
        mo.device_memory = !measure_device_memory.empty() ? measure_device_memory : device_memory;
        if (!mo.device_memory.empty()) parse_device_memory(mo.device_memory);  // refused here when malformed
        mo.timeout_s = measure_timeout;
        for (const std::string& x : measure_only) mo.only.push_back(parse_measure_only(x));
        mo.quill = self_executable();
        QUILL_CHECK(mo.device == "cpu" || mo.device == "cuda", "--measure-device {}: cpu or cuda", mo.device);
        QUILL_CHECK(measure_steps >= 1, "--measure-steps {}: at least one step", measure_steps);
        if ((mo.device == "cuda") != on_gpu)
          std::fprintf(stderr, "note: --measure-device %s with --gpu %s: the runs compute in %s, the plan and the "
                               "model in %s\n", mo.device.c_str(), gpu.c_str(), mo.device == "cuda" ? "bf16" : "fp32",
                       on_gpu ? "bf16" : "fp32");
      }
      tune::SearchRequest q;
      q.config = load_inkling_config(model);
      q.gpus = gpus;
      q.gpus_per_node = pflags.gpus_per_node;
      q.row_tokens = row_tokens;
      q.global_batch = global_batch;
      q.cross_node_ep = cross_node_ep;
      q.max_split_imbalance = max_imbalance;
      q.freeze = freeze;
      if (freeze_preset == "miles") {
        for (const std::string& p : miles_frozen_patterns()) q.freeze.push_back(p);
      } else {
        QUILL_CHECK(freeze_preset == "none", "--freeze-preset: unknown preset '{}' (miles or none)", freeze_preset);
      }
      q.host_memory = std::max<int64_t>(0, parse_memory_size("--host-memory", host_memory));
      q.device_memory = parse_device_memory(device_memory);
      if (q.device_memory < 0) {
        QUILL_CHECK(on_gpu, "--gpu cpu: give --device-memory (the memory each CPU rank may use)");
        q.device_memory = plan::kH200MemoryBytes;
      }
      QUILL_CHECK(on_gpu || !rates_path.empty(), "--gpu cpu: give --compute-rates (the CPU's measured rates)");
      q.device = on_gpu ? Device::CUDA : Device::CPU;
      q.show_progress = true;  // stderr; the report is stdout's
      tune::SearchResult found = tune::search_layouts(q);
      const double search_s = timer.seconds();

      tune::RankRequest rq;
      rq.config = q.config;
      rq.row_tokens = row_tokens;
      rq.global_batch = global_batch;
      rq.device = q.device;
      rq.freeze = q.freeze;
      rq.comm = comm_params(pflags);
      rq.rates = rates_path.empty() ? tune::h200_compute_rates() : rates_with(rates_path, tune::h200_compute_rates());
      rq.price_per_gpu_hour = pflags.price_per_gpu_hour;
      if (!rq.price_per_gpu_hour && on_gpu) rq.price_per_gpu_hour = kUsdPerGpuHourP5en;
      rq.peak_flops = kPeakFlopsH100Bf16;
      rq.show_progress = true;
      // Expert-parallel groups inside a node, unless allowed across (the search kept ep <= GPUs per node;
      // the grid's placement decides).
      std::vector<tune::Candidate> kept;
      for (tune::Candidate& c : found.fitting) {
        if (!cross_node_ep && !tune::expert_groups_inside_nodes(c.layout, q.gpus_per_node)) {
          tune::Refusal& x = found.refused["an expert-parallel group spans nodes (--allow-cross-node-ep)"];
          if (x.count++ == 0) x.example = c.layout.describe();
          continue;
        }
        kept.push_back(std::move(c));
      }
      const std::vector<tune::RankedLayout> ranked = tune::rank_layouts(kept, rq);
      const double total_s = timer.seconds();
      std::optional<MeasureResult> measured;
      if (measuring) measured = measure_candidates(ranked, rq, mo);

      // --compare: each recipe's layout, offload and recompute, projected, with the place it would take.
      struct Compared {
        std::string path;
        tune::RankedLayout r;
        int place = 0;
        bool fits = false;
        std::string fit;
      };
      std::vector<Compared> compared;
      for (const std::string& path : compare) {
        const Recipe recipe = read_recipe(path);
        tune::Candidate c;
        c.layout = recipe_layout_spec(recipe.layout, q.config.num_layers);
        c.split = c.layout.pp_layers.empty() ? "even" : "recipe's";
        if (recipe.layout.offload && recipe.layout.offload->optimizer_fraction.value_or(0) > 0) {
          c.optimizer.cpu_offload = true;
          c.optimizer.offload_fraction = *recipe.layout.offload->optimizer_fraction;
          c.optimizer.overlap_d2h_h2d = recipe.layout.offload->overlap_d2h_h2d.value_or(false);
        }
        if (const std::optional<Recompute>& rc = recipe.layout.recompute) {
          try {
            c.recompute = parse_recompute(rc->granularity, rc->method.value_or(""), rc->num_layers.value_or(1));
          } catch (const Error& e) {
            QUILL_FAIL("--compare {}: layout.recompute: {}", path, e.what());
          }
        }
        QUILL_CHECK(c.layout.world() == gpus, "--compare {}: its layout has {} ranks, --gpus is {}", path,
                    c.layout.world(), gpus);
        plan::PlanRequest pr;
        pr.config = q.config, pr.layout = c.layout, pr.row_tokens = row_tokens, pr.global_batch = global_batch;
        pr.optimizer = c.optimizer, pr.gpus_per_node = q.gpus_per_node, pr.freeze = q.freeze, pr.device = q.device;
        pr.recompute = c.recompute;
        const plan::MemoryPlan mp = plan::plan_memory(pr);
        for (const plan::StagePlan& s : mp.stages) {
          c.stage_device_bytes.push_back(s.device_total());
          c.stage_allocator_peak_bytes.push_back(s.allocator_peak());
          c.stage_roles.push_back(s.role);
        }
        const plan::FitVerdict v = plan::check_fit(mp, q.device_memory);
        Compared x{path, tune::project_candidate(c, rq), 1, v.fits, v.message};
        for (const tune::RankedLayout& r : ranked) x.place += r.tokens_per_s_per_gpu > x.r.tokens_per_s_per_gpu ? 1 : 0;
        compared.push_back(std::move(x));
      }

      if (json) {
        nlohmann::json j;
        j["format"] = "quill-tune-1";
        j["model"] = model;
        j["gpus"] = gpus, j["gpus_per_node"] = q.gpus_per_node, j["gpu"] = gpu;
        j["row_tokens"] = row_tokens, j["global_batch"] = global_batch;
        j["geometries"] = found.geometries, j["plans"] = found.plans;
        j["search_s"] = search_s, j["total_s"] = total_s;
        j["comm_model"] = rq.comm.source;
        j["compute_model"] = rq.rates.source;
        nlohmann::json all = nlohmann::json::array();
        for (size_t i = 0; i < ranked.size(); ++i) all.push_back(ranked_json(ranked[i], static_cast<int>(i + 1)));
        j["ranked"] = all;
        nlohmann::json refused = nlohmann::json::object();
        for (const auto& [reason, x] : found.refused) refused[reason] = {{"count", x.count}, {"example", x.example}};
        j["refused"] = refused;
        j["pruning"] = found.pruning;
        nlohmann::json cmp = nlohmann::json::array();
        for (const Compared& c : compared) {
          nlohmann::json e = ranked_json(c.r, c.place);
          e["recipe"] = c.path, e["fits"] = c.fits, e["fit"] = c.fit;
          cmp.push_back(e);
        }
        j["compared"] = cmp;
        j["measured"] = measured ? measure_json(*measured) : nlohmann::json(nullptr);
        std::printf("%s\n", j.dump(1).c_str());
      } else {
        std::printf("quill tune: %s on %d GPUs (%d per node, %s), %lld-token rows, %lld rows per step\n", model.c_str(),
                    gpus, q.gpus_per_node, gpu.c_str(), static_cast<long long>(row_tokens),
                    static_cast<long long>(global_batch));
        std::printf("%lld geometries examined, %lld memory plans, %zu layouts fit and are ranked (%.1f s; search %.1f s)\n",
                    static_cast<long long>(found.geometries), static_cast<long long>(found.plans), ranked.size(), total_s,
                    search_s);
        std::printf("every figure of this table is MODELLED (docs/tune.md): compute from measured per-op rates, "
                    "collectives from their exact bytes and the communication model; nothing here ran%s\n\n",
                    measured ? " (the measured ranking follows it)" : "");
        std::printf("%s", ranked_header(false).c_str());
        for (size_t i = 0; i < ranked.size() && static_cast<int>(i) < top; ++i)
          std::printf("%s", ranked_row(ranked[i], static_cast<int>(i + 1), false).c_str());
        for (const Compared& c : compared) {
          std::printf("\n%s (%s): would rank %d of %zu%s\n", c.path.c_str(), c.fits ? "fits" : "does NOT fit", c.place,
                      ranked.size() + 1, c.fits ? "" : (": " + c.fit).c_str());
          std::printf("%s", ranked_row(c.r, c.place, false).c_str());
        }
        std::printf("\nrefused:\n");
        for (const auto& [reason, x] : found.refused)
          std::printf("  %lld  %s\n       e.g. %s\n", static_cast<long long>(x.count), reason.c_str(),
                      x.example.substr(0, 400).c_str());
        std::printf("pruning:\n");
        for (const std::string& p : found.pruning) std::printf("  - %s\n", p.c_str());
        std::printf("compute model: %s\ncomm model: %s\n", rq.rates.source.c_str(), rq.comm.source.c_str());
        if (measured) std::printf("%s", measure_text(*measured).c_str());
      }
      if (!emit.empty()) {
        QUILL_CHECK(!ranked.empty(), "--emit-recipe {}: no layout fits, nothing to write", emit);
        tune::EmitRequest e;
        e.model = q.config.source.empty() ? model : q.config.source;
        e.gpu = on_gpu ? "H200" : "CPU";
        e.gpu_memory_gb = on_gpu ? 141 : q.device_memory >> 30;
        e.gpus_per_node = q.gpus_per_node;
        e.row_tokens = row_tokens;
        e.global_batch = global_batch;
        e.launcher = emit_launcher;
        e.recipe_path = emit;
        // The measured best when --measure measured one, else the modelled best.
        const bool from_measured = measured && !measured->ranking.empty();
        write_recipe(emit, tune::tuned_recipe(
                               from_measured ? *measured->candidates[measured->ranking.front()].projected : ranked.front(), e));
        if (!json) std::printf("recipe of %srank 1 in %s\n", from_measured ? "the measured ranking's " : "", emit.c_str());
      }
      // Nothing fits: the report above says why; the status says so to a script (issue 44).
      if (ranked.empty()) {
        std::fprintf(stderr, "quill tune: no layout fits %d GPUs (the refusals above say why)\n", gpus);
        return 1;
      }
      return 0;
    };
  });
}

}  // namespace quill::cli
