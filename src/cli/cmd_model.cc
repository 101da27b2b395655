// `quill model info --config PATH`: the model's dimensions and parameter counts as one JSON object.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "model/config.h"

namespace quill::cli {

void add_model_commands(CLI::App& app, Runner& run) {
  CLI::App* model = app.add_subcommand("model", "inspect a model");
  model->require_subcommand(1);
  CLI::App* info = model->add_subcommand("info", "print dimensions and parameter counts of a config as JSON");
  static std::string config_path;
  info->add_option("--config", config_path, "config.json, or a directory holding it")->required();
  info->callback([&run] {
    run = [] {
      const InklingConfig c = load_inkling_config(config_path);
      const ParamCounts counts = count_params(c);
      int64_t moe_layers = 0, local_layers = 0;
      for (int64_t i = 0; i < c.num_layers; ++i) {
        moe_layers += c.is_moe(i) ? 1 : 0;
        local_layers += c.is_local(i) ? 1 : 0;
      }
      nlohmann::json j;
      j["config"] = c.source;
      j["total_params"] = counts.total;
      j["active_params"] = counts.active;
      // transformers' num_parameters(): the router's selection biases are buffers there.
      j["transformers_params"] = counts.total - counts.buffers;
      j["hidden_size"] = c.hidden_size;
      j["num_layers"] = c.num_layers;
      j["moe_layers"] = moe_layers;
      j["dense_layers"] = c.num_layers - moe_layers;
      j["local_layers"] = local_layers;
      j["global_layers"] = c.num_layers - local_layers;
      j["vocab_size"] = c.vocab_size;
      j["unpadded_vocab_size"] = c.unpadded_vocab_size;
      j["n_routed_experts"] = c.n_routed_experts;
      j["num_experts_per_tok"] = c.num_experts_per_tok;
      j["n_shared_experts"] = c.n_shared_experts;
      std::printf("%s\n", j.dump(2).c_str());
      return 0;
    };
  });
}

}  // namespace quill::cli
