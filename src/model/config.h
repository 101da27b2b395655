// InklingConfig: the text decoder's hyperparameters, read from a Hugging Face config.json.
//
// Two schemas exist (docs/config.md): transformers' InklingTextConfig (`moe_intermediate_size` = expert
// width, `intermediate_size` = dense width, `layer_types`, `mlp_layer_types`) and the release's
// text_config (`intermediate_size` = expert width next to `dense_intermediate_size`, `dense_mlp_idx`,
// `local_layer_ids`). An omitted key takes transformers' default (transformers 5.17.0,
// models/inkling/configuration_inkling.py; the table is model/config_keys.h), so quill builds the
// model transformers builds from the same file; a value quill does not implement, or a key it does not
// know, is an error naming it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace quill {

struct InklingConfig {
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t vocab_size = 0;           // padded rows of embed/unembed
  int64_t unpadded_vocab_size = 0;  // real vocabulary (= vocab_size when the config has none: not padded)
  int64_t num_heads = 0, num_kv_heads = 0, head_dim = 0;              // global layers
  int64_t swa_num_heads = 0, swa_num_kv_heads = 0, swa_head_dim = 0;  // local (sliding) layers
  int64_t d_rel = 0;
  int64_t rel_extent = 0;           // relative-bias extent of global layers
  int64_t sliding_window = 0;       // window and relative-bias extent of local layers
  bool log_scaling = false;         // log_scaling_n_floor given and not null (transformers' default: off)
  double log_scaling_n_floor = 0, log_scaling_alpha = 0;
  double rms_norm_eps = 0;
  int64_t conv_kernel_size = 0;
  int64_t dense_intermediate_size = 0;  // dense MLP width
  int64_t moe_intermediate_size = 0;    // routed and shared expert width
  int64_t n_routed_experts = 0, num_experts_per_tok = 0, n_shared_experts = 0;
  double route_scale = 0;
  double logits_mup_width_multiplier = 0;
  double initializer_range = 0.02;  // std of the random initialisation
  std::vector<bool> layer_is_local;  // per layer: sliding-window attention
  std::vector<bool> layer_is_moe;    // per layer: MoE (else dense MLP)
  std::string source;                // file it came from, for messages

  bool is_local(int64_t layer) const { return layer_is_local[static_cast<size_t>(layer)]; }
  bool is_moe(int64_t layer) const { return layer_is_moe[static_cast<size_t>(layer)]; }
  int64_t heads(int64_t layer) const { return is_local(layer) ? swa_num_heads : num_heads; }
  int64_t kv_heads(int64_t layer) const { return is_local(layer) ? swa_num_kv_heads : num_kv_heads; }
  int64_t layer_head_dim(int64_t layer) const { return is_local(layer) ? swa_head_dim : head_dim; }
  int64_t extent(int64_t layer) const { return is_local(layer) ? sliding_window : rel_extent; }
  int64_t window(int64_t layer) const { return is_local(layer) ? sliding_window : 0; }
};

// Parses config.json text (a full multimodal config with `text_config`, or a text config alone) and
// validates it. `source` names the file in error messages.
InklingConfig parse_inkling_config(const std::string& json_text, const std::string& source);
InklingConfig load_inkling_config(const std::string& path);  // a file, or a directory holding config.json
// Throws naming the field when a value is out of range or inconsistent.
void validate_config(const InklingConfig& config);
// The config as transformers' InklingTextConfig JSON (its names), for tools and checkpoints.
std::string config_to_hf_json(const InklingConfig& config);

struct ParamCounts {
  int64_t total = 0;   // every text-trunk tensor: both vocab tables, all experts, 1-D vectors, the router's
                       // selection bias (a buffer in transformers, so its parameter count is total - buffers)
  int64_t active = 0;  // N of docs/recipes-and-measurement.md §2
  int64_t buffers = 0; // the selection bias: n_routed_experts per MoE layer
};
// A quill::Error naming the config file and its dimensions when a count passes 2^63.
ParamCounts count_params(const InklingConfig& config);

// Bytes of host memory that ParamTable::for_config allocates: an fp32 value and an fp32 gradient of
// every parameter (8 bytes each).
constexpr int64_t kHostBytesPerParam = 8;
// Before allocating: a quill::Error naming the config file, the largest part of the model and the
// field that makes it large, when the parameters would not fit in `available_bytes` of host memory.
void check_params_fit_memory(const InklingConfig& config, uint64_t available_bytes);

}  // namespace quill
