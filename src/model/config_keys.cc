// The key table of config_keys.h. Defaults: transformers 5.17.0, models/inkling/configuration_inkling.py
// (the class fields of InklingTextConfig and what its __post_init__ derives), and PreTrainedConfig's fields
// in configuration_utils.py for the base keys.
#include "model/config_keys.h"

#include <array>

namespace quill {
namespace {

using enum KeyUse;

constexpr std::array kTransformersKeys = {
    // The model's dimensions and constants (read by quill).
    ConfigKey{"vocab_size", "201024", kModel, "rows of the embedding and unembedding tables"},
    ConfigKey{"unpadded_vocab_size", "null", kModel,
              "null: the head is not padded, the softmax covers all vocab_size logits (transformers slices the "
              "logits to it only when it is set and smaller)"},
    ConfigKey{"hidden_size", "6144", kModel, ""},
    ConfigKey{"num_hidden_layers", "66", kModel, ""},
    ConfigKey{"num_attention_heads", "64", kModel, "query heads of the global layers"},
    ConfigKey{"num_key_value_heads", "8", kModel, "key/value heads of the global layers"},
    ConfigKey{"head_dim", "128", kModel, "head dimension of the global layers (a default, not hidden/heads)"},
    ConfigKey{"swa_num_attention_heads", "64", kModel, "query heads of the sliding layers (not copied from the global ones)"},
    ConfigKey{"swa_num_key_value_heads", "16", kModel, "key/value heads of the sliding layers"},
    ConfigKey{"swa_head_dim", "128", kModel, "head dimension of the sliding layers"},
    ConfigKey{"sliding_window_size", "512", kModel, "window and relative-bias extent of the sliding layers"},
    ConfigKey{"d_rel", "16", kModel, "per-head width of the relative states"},
    ConfigKey{"rel_extent", "1024", kModel, "relative-bias extent of the global layers"},
    ConfigKey{"log_scaling_n_floor", "null", kModel, "null: no log scaling"},
    ConfigKey{"log_scaling_alpha", "0.1", kModel, "used only when log_scaling_n_floor is set"},
    ConfigKey{"local_layer_ids", "null", kModel, "sliding layers, when layer_types is not given"},
    ConfigKey{"layer_types", "null", kModel,
              "null: from local_layer_ids, else every layer i with (i+1) % 6 != 0 is sliding"},
    ConfigKey{"rms_norm_eps", "1e-06", kModel, "every RMSNorm"},
    ConfigKey{"conv_kernel_size", "4", kModel, "kernel of the four short convolutions"},
    ConfigKey{"mlp_layer_types", "null", kModel, "null: layers below dense_mlp_idx (default 0) dense, the rest sparse"},
    ConfigKey{"intermediate_size", "24576", kModel, "dense MLP width (the release means the expert width: docs/config.md)"},
    ConfigKey{"moe_intermediate_size", "3072", kModel, "routed and shared expert width"},
    ConfigKey{"n_routed_experts", "256", kModel, ""},
    ConfigKey{"num_experts_per_tok", "6", kModel, ""},
    ConfigKey{"n_shared_experts", "2", kModel, ""},
    ConfigKey{"route_scale", "8.0", kModel, ""},
    ConfigKey{"logits_mup_width_multiplier", "24.0", kModel, "the final hidden states are divided by it"},
    ConfigKey{"initializer_range", "0.02", kModel, "std of the random initialisation"},
    // One value implemented.
    ConfigKey{"model_type", "\"inkling_text\"", kOnly, "an Inkling text config"},
    ConfigKey{"hidden_act", "\"silu\"", kOnly, "SwiGLU"},
    ConfigKey{"shared_expert_sink", "true", kOnly,
              "router-weighted shared experts (transformers' forward always does this, whatever the key says)"},
    ConfigKey{"attention_dropout", "0.0", kOnly, "no dropout"},
    ConfigKey{"pad_token_id", "null", kOnly,
              "no padding row: transformers would pass it to nn.Embedding as padding_idx, which zeroes that row and "
              "its gradient"},
    ConfigKey{"number_of_conv_states", "4", kOnly, "four short convolutions per layer"},
    ConfigKey{"tie_word_embeddings", "false", kOnly,
              "separate embed and unembed tables; transformers 5.17 declares no such field and its Inkling models "
              "never tie (_tied_weights_keys = {}), so true would not tie there either"},
    // Read by nothing quill computes; transformers' Inkling model does not read them for training either.
    ConfigKey{"max_position_embeddings", "131072", kIgnored, "no position embedding (no RoPE) depends on it"},
    ConfigKey{"rms_norm_eps_moe_gate", "1e-06", kIgnored, "transformers' router applies no normalisation"},
    ConfigKey{"bos_token_id", "1", kIgnored, "the model never reads it (the rows carry the tokens)"},
    ConfigKey{"eos_token_id", "2", kIgnored, "the model never reads it"},
    ConfigKey{"num_mtp_layers", "null", kIgnored,
              "transformers builds no MTP layers (it skips model.mtp.* on load); quill passes MTP tensors through"},
    ConfigKey{"chain_hidden_post_norm", "false", kIgnored, "MTP only"},
    ConfigKey{"mtp_hidden_states_first", "true", kIgnored, "MTP only"},
    ConfigKey{"mtp_local_layer_ids", "null", kIgnored, "MTP only"},
    // PreTrainedConfig's own keys (configuration_utils.py): bookkeeping, output switches, task heads.
    ConfigKey{"architectures", "null", kIgnored, "bookkeeping"},
    ConfigKey{"transformers_version", "null", kIgnored, "bookkeeping"},
    ConfigKey{"_name_or_path", "\"\"", kIgnored, "bookkeeping"},
    ConfigKey{"dtype", "null", kIgnored, "the checkpoint's tensors carry their dtypes; quill computes in its own"},
    ConfigKey{"torch_dtype", "null", kIgnored, "older spelling of dtype"},
    ConfigKey{"output_hidden_states", "false", kIgnored, "an output switch"},
    ConfigKey{"output_attentions", "false", kIgnored, "an output switch"},
    ConfigKey{"return_dict", "true", kIgnored, "an output switch"},
    ConfigKey{"chunk_size_feed_forward", "0", kIgnored, "Inkling's layers do not chunk"},
    ConfigKey{"is_encoder_decoder", "false", kIgnored, "a decoder either way"},
    ConfigKey{"id2label", "null", kIgnored, "classification heads only"},
    ConfigKey{"label2id", "null", kIgnored, "classification heads only"},
    ConfigKey{"problem_type", "null", kIgnored, "classification heads only"},
};

constexpr std::array kReleaseKeys = {
    // transformers' __post_init__ consumes these two as keyword arguments (they are not fields).
    ConfigKey{"dense_intermediate_size", "null", kModel, "dense MLP width; with it, intermediate_size is the expert width"},
    ConfigKey{"dense_mlp_idx", "0", kModel, "layers below it are dense, when mlp_layer_types is not given"},
    // Read by SGLang's InklingModelConfig; transformers ignores them (they become unread attributes).
    ConfigKey{"q_bias", "false", kOnly, "no projection biases"},
    ConfigKey{"o_bias", "false", kOnly, "no projection biases"},
    ConfigKey{"use_embed_norm", "true", kOnly, "RMSNorm after the embedding"},
    ConfigKey{"use_sconv", "true", kOnly, "the four short convolutions per layer"},
    ConfigKey{"final_logit_softcapping", "null", kOnly, "no logit softcap"},
    ConfigKey{"use_gate_bias", "true", kOnly, "the router's selection bias"},
    ConfigKey{"gate_activation", "\"sigmoid\"", kOnly, "sigmoid router scores"},
    ConfigKey{"norm_after_topk", "true", kOnly, "weights normalised over the chosen experts"},
    ConfigKey{"use_global_scale", "true", kOnly, "learned global scales"},
};

constexpr std::array kAliases = {
    KeyAlias{"sliding_window", "sliding_window_size"},
    KeyAlias{"sconv_kernel_size", "conv_kernel_size"},
    KeyAlias{"num_local_experts", "n_routed_experts"},
    KeyAlias{"embedding_multiplier", "logits_mup_width_multiplier"},
    KeyAlias{"model_max_length", "max_position_embeddings"},
};

}  // namespace

std::span<const ConfigKey> transformers_text_keys() { return kTransformersKeys; }
std::span<const ConfigKey> release_text_keys() { return kReleaseKeys; }
std::span<const KeyAlias> config_key_aliases() { return kAliases; }

const ConfigKey* find_config_key(std::string_view name) {
  for (const ConfigKey& k : kTransformersKeys)
    if (k.name == name) return &k;
  for (const ConfigKey& k : kReleaseKeys)
    if (k.name == name) return &k;
  return nullptr;
}

}  // namespace quill
