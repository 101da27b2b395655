// `quill plan`: the memory a training layout needs per GPU, by pipeline stage and category, before
// anything is loaded (plan/memory_plan.h; docs/plan.md). The model and layout flags are `quill
// train`'s, the optimizer memory flags Megatron's (cli/optimizer_flags.h); or a recipe, as `quill run`
// takes it (its layout, row length, global batch and offload; the model from --config or --model-dir).
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "base/error.h"
#include "base/host_memory.h"
#include "cli/commands.h"
#include "cli/count_flags.h"
#include "cli/layout_flags.h"
#include "cli/ddp_flags.h"
#include "cli/memory_flags.h"
#include "cli/optimizer_flags.h"
#include "cli/fp8_flags.h"
#include "cli/recompute_flags.h"
#include "data/rows.h"
#include "model/params.h"
#include "plan/plan_report.h"
#include "recipe/recipe.h"
#include "recipe/run_recipe.h"

namespace quill::cli {

void add_plan_command(CLI::App& app, Runner& run) {
  CLI::App* cmd = app.add_subcommand(
      "plan", "memory per GPU of a training layout by pipeline stage and category, before anything is loaded");
  static std::string recipe_path, config_path, model_dir, rows_dir, device = "cuda", device_memory, host_memory;
  static std::string freeze_preset = "miles";
  static std::vector<std::string> freeze;
  static int64_t row_tokens = 0, global_batch = 1;
  static int gpus_per_node = 8;
  static double expert_rows_factor = 1.0;
  static bool json = false;
  static LayoutSpec layout;
  static OptimizerMemory memory;
  static OptimizerFlagNames names;
  static RecomputeFlags recompute;
  cmd->add_option("recipe", recipe_path, "a recipe YAML (its layout, workload and offload), as quill run takes it");
  cmd->add_option("--config", config_path, "config.json (or a directory holding it)");
  cmd->add_option("--model-dir", model_dir, "with a recipe: the Hugging Face model directory (its config.json)");
  cmd->add_option("--rows", rows_dir, "rows directory: the row length from its manifest");
  cmd->add_option("--row-tokens", row_tokens, "tokens per row (one row per micro-batch), instead of --rows");
  cmd->add_option("--global-batch", global_batch, "rows per optimizer step (default 1)");
  cmd->add_option("--device", device, "cuda (bf16, default) | cpu (the fp32 reference)");
  add_device_memory_flag(cmd, device_memory);
  cmd->add_option("--freeze", freeze, "freeze parameters matching this glob (repeatable)");
  cmd->add_option("--freeze-preset", freeze_preset, "miles (relative-bias tables and global scales) | none");
  add_layout_flags(cmd, layout);
  add_optimizer_flags(cmd, memory, names);
  // Accepted so that a train command line plans as it is: the overlaps allocate nothing (the collectives
  // run in place in the buckets' buffers); the bucket size moves each bucket's padding and offloaded head.
  static DdpConfig ddp;
  add_ddp_flags(cmd, ddp);
  // --tp-comm-overlap moves some buffers earlier and keeps others longer: planned as quill train runs it.
  static bool tp_comm_overlap = false;
  cmd->add_flag("--tp-comm-overlap", tp_comm_overlap,
                "plan the buffers of --tp-comm-overlap's early collectives (with --sequence-parallel)");
  // --overlap-moe-expert-parallel-comm keeps one more micro-batch's activations (the combined 1F1B).
  static bool overlap_moe_ep_comm = false;
  cmd->add_flag("--overlap-moe-expert-parallel-comm", overlap_moe_ep_comm,
                "plan the combined 1F1B step's two micro-batches in flight (expert parallelism, --pp 1)");
  // --moe-expert-wgrad-micro-batches 2 holds a micro-batch's routed rows per MoE layer until the next backward, and
  // merges the two; with --delay-wgrad-compute under expert parallelism the merge runs beside the return exchange.
  static int expert_wgrad_micro_batches = 1;
  cmd->add_option("--moe-expert-wgrad-micro-batches", expert_wgrad_micro_batches,
                  "plan the held routed rows of --moe-expert-wgrad-micro-batches 2 (quill train's flag)")
      ->check(CLI::IsMember({1, 2}));
  static bool delay_wgrad_compute = false;
  cmd->add_flag("--delay-wgrad-compute", delay_wgrad_compute,
                "plan the late weight gradients beside the backward's return exchange (expert parallelism)");
  add_recompute_flags(cmd, recompute);
  static Fp8Flags fp8;
  add_fp8_flags(cmd, fp8);
  cmd->add_option("--gpus-per-node", gpus_per_node, "GPUs per node, for the pinned host memory per node (default 8)");
  cmd->add_option("--host-memory", host_memory,
                  "memory of each node to check the startup host bytes against (pinned optimizer state and the "
                  "weights' fp32 copy before placement), e.g. 560GiB (default: this machine's)");
  cmd->add_option("--expert-rows-factor", expert_rows_factor,
                  "routed-expert rows a rank keeps for backward against balanced routing, with --ep > 1 (default 1)");
  cmd->add_flag("--json", json, "print the plan as JSON (bytes) instead of the table");
  cmd->callback([&run, cmd] {
    run = [cmd] {
      if (cmd->count("--row-tokens") > 0) check_positive("--row-tokens", row_tokens);
      check_positive("--global-batch", global_batch);
      plan::PlanRequest q;
      q.layout = layout;
      q.global_batch = global_batch;
      q.row_tokens = row_tokens;
      if (cmd->count("--ddp-bucket-size") > 0) check_positive("--ddp-bucket-size", ddp.bucket_size);
      q.ddp_bucket_size = ddp.bucket_size;
      if (!recipe_path.empty()) {
        const Recipe recipe = read_recipe(recipe_path);
        const std::string model = !config_path.empty() ? config_path : model_dir;
        QUILL_CHECK(!model.empty(), "quill plan {}: give --config or --model-dir (the recipe's model directory)",
                    recipe_path);
        q.config = load_inkling_config(model);
        q.layout = recipe_layout_spec(recipe.layout, q.config.num_layers);
        q.global_batch = recipe.workload.global_batch;
        q.row_tokens = recipe.workload.row_tokens;
        QUILL_CHECK(recipe.layout.rows_per_microbatch == 1,
                    "layout.rows_per_microbatch {}: quill runs one row per micro-batch", recipe.layout.rows_per_microbatch);
        // The recipe's offload, unless the command line sets it (the flags win, to compare variants).
        const bool offload_flags = cmd->count("--optimizer-cpu-offload") + cmd->count("--optimizer-offload-fraction") > 0;
        if (!offload_flags && recipe.layout.offload && recipe.layout.offload->optimizer_fraction.value_or(0) > 0) {
          memory.cpu_offload = true;
          memory.offload_fraction = *recipe.layout.offload->optimizer_fraction;
          memory.overlap_d2h_h2d = recipe.layout.offload->overlap_d2h_h2d.value_or(false);
        }
        if (recipe.gpu.per_node.value_or(0) > 0) gpus_per_node = static_cast<int>(*recipe.gpu.per_node);
      } else {
        QUILL_CHECK(!config_path.empty(), "quill plan: give --config (or a recipe)");
        q.config = load_inkling_config(config_path);
        if (!rows_dir.empty()) {
          QUILL_CHECK(row_tokens == 0, "quill plan: give --rows or --row-tokens, not both");
          q.row_tokens = RowsReader::open(rows_dir).row_tokens();
        }
        QUILL_CHECK(q.row_tokens > 0, "quill plan: give --rows (its manifest's row length) or --row-tokens");
      }
      QUILL_CHECK(device == "cuda" || device == "cpu", "--device: '{}' is not cpu or cuda", device);
      q.device = device == "cuda" ? Device::CUDA : Device::CPU;
      for (const std::string& n : finish_optimizer_flags(memory, names)) std::fprintf(stderr, "note: %s\n", n.c_str());
      q.optimizer = memory;
      q.freeze = freeze;
      if (freeze_preset == "miles") {
        for (const std::string& p : miles_frozen_patterns()) q.freeze.push_back(p);
      } else {
        QUILL_CHECK(freeze_preset == "none", "--freeze-preset: unknown preset '{}' (miles or none)", freeze_preset);
      }
      q.gpus_per_node = gpus_per_node;
      q.expert_rows_factor = expert_rows_factor;
      q.recompute = recompute.resolve();
      q.tp_comm_overlap = tp_comm_overlap;
      q.overlap_moe_ep_comm = overlap_moe_ep_comm;
      q.expert_wgrad_micro_batches = expert_wgrad_micro_batches;
      q.delay_wgrad_compute = delay_wgrad_compute;
      // The plan counts FP8 copies for either device: the CUDA plan is what the CUDA kernels will need.
      q.fp8 = fp8.resolve().enabled();  // refuses what quill train refuses (cli/fp8_flags.h)
      int64_t memory_bytes = parse_device_memory(device_memory);
      if (memory_bytes < 0 && q.device == Device::CUDA) memory_bytes = plan::kH200MemoryBytes;
      const plan::MemoryPlan mp = plan::plan_memory(q);
      // The host at startup, node by node (quill train checks its own node the same way on a GPU).
      int64_t host_bytes = parse_memory_size("--host-memory", host_memory);
      if (host_bytes < 0) host_bytes = static_cast<int64_t>(host_memory_bytes());
      const std::vector<plan::FitVerdict> host = plan::check_nodes_host_fit(mp, host_bytes);
      if (json) {
        nlohmann::json j = plan::plan_json(mp, memory_bytes);
        j["host_memory_bytes"] = host_bytes;
        j["host_fits_per_node"] = nlohmann::json::array();
        for (const plan::FitVerdict& h : host) j["host_fits_per_node"].push_back(h.fits);
        std::printf("%s\n", j.dump(1).c_str());
      } else {
        std::printf("%s", plan::plan_table(mp, memory_bytes).c_str());
      }
      const plan::FitVerdict v = plan::check_fit(mp, memory_bytes);
      if (!v.fits && !json) std::printf("%s\n", v.message.c_str());
      if (!json && host_bytes > 0)
        for (size_t n = 0; n < host.size(); ++n)
          std::printf("host node %zu: %s\n", n,
                      host[n].fits ? fmt::format("fits {} (at most {:.0f}% of it is planned for)", plan::format_bytes(host_bytes),
                                                 100 * plan::kHostShare).c_str()
                                   : host[n].message.c_str());
      // A layout that does not fit exits 1 after its report (issue 44), so that a script can branch on it:
      // the device always, the hosts when --host-memory named them (the default, this machine's memory, is
      // rarely the cluster's).
      const bool hosts_fit = std::all_of(host.begin(), host.end(), [](const plan::FitVerdict& h) { return h.fits; });
      if (!v.fits || (!host_memory.empty() && !hosts_fit)) {
        if (!json)  // --json says it in "fits" and "host_fits_per_node"
          std::fprintf(stderr, "quill plan: the layout does not fit %s\n",
                       !v.fits ? "the device's memory" : "the nodes' host memory (--host-memory)");
        return 1;
      }
      return 0;
    };
  });
}

}  // namespace quill::cli
