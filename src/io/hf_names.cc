#include "io/hf_names.h"

#include <array>
#include <utility>

#include "base/error.h"

namespace quill {

namespace {

constexpr const char* kLayerPrefix = "model.llm.layers.";

// Whole-tensor renames, release -> transformers (conversion_mapping.py "inkling_mm_model", read in
// reverse; InklingForCausalLM's module names in modeling_inkling.py).
constexpr std::array<std::pair<const char*, const char*>, 4> kTopLevel = {{
    {"model.llm.embed.weight", "model.embed_tokens.weight"},
    {"model.llm.embed_norm.weight", "model.embed_norm.weight"},
    {"model.llm.norm.weight", "model.norm.weight"},
    {"model.llm.unembed.weight", "lm_head.weight"},
}};
constexpr std::array<std::pair<const char*, const char*>, 20> kLayerSuffix = {{
    {"attn_norm.weight", "input_layernorm.weight"},
    {"mlp_norm.weight", "post_attention_layernorm.weight"},
    {"attn.wq_du.weight", "self_attn.q_proj.weight"},
    {"attn.wk_dv.weight", "self_attn.k_proj.weight"},
    {"attn.wv_dv.weight", "self_attn.v_proj.weight"},
    {"attn.wr_du.weight", "self_attn.r_proj.weight"},
    {"attn.wo_ud.weight", "self_attn.o_proj.weight"},
    {"attn.q_norm.weight", "self_attn.q_norm.weight"},
    {"attn.k_norm.weight", "self_attn.k_norm.weight"},
    {"attn.rel_logits_proj.proj", "self_attn.rel_logits_proj.proj"},
    {"attn.k_sconv.weight", "self_attn.k_sconv.conv1d.weight"},
    {"attn.v_sconv.weight", "self_attn.v_sconv.conv1d.weight"},
    {"attn_sconv.weight", "attn_sconv.conv1d.weight"},
    {"mlp_sconv.weight", "mlp_sconv.conv1d.weight"},
    {"mlp.gate.weight", "mlp.gate.weight"},
    {"mlp.gate.bias", "mlp.gate.e_score_correction_bias"},
    {"mlp.gate.global_scale", "mlp.gate.global_scale"},
    {"mlp.experts.w2_weight", "mlp.experts.down_proj"},
    {"mlp.shared_experts.shared_w2_weight", "mlp.shared_experts.down_proj"},
    {"mlp.w2_md.weight", "mlp.down_proj.weight"},
}};
// gate/up tensors: release suffix -> transformers gate and up names ("" up: one tensor, gate_up_proj).
struct GateUp {
  const char* release;
  const char* gate;
  const char* up;
};
constexpr std::array<GateUp, 3> kGateUp = {{
    {"mlp.w13_dn.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight"},
    {"mlp.shared_experts.shared_w13_weight", "mlp.shared_experts.gate_proj", "mlp.shared_experts.up_proj"},
    {"mlp.experts.w13_weight", "mlp.experts.gate_up_proj", ""},
}};
// mlp.global_scale last: "mlp.gate.global_scale" also ends with it, so suffixes are matched exactly.
constexpr std::pair<const char*, const char*> kDenseScale = {"mlp.global_scale", "mlp.global_scale"};

bool starts_with_any(const std::string& name, std::initializer_list<const char*> prefixes) {
  for (const char* p : prefixes)
    if (name.starts_with(p)) return true;
  return false;
}

}  // namespace

const char* hf_format_name(HfFormat format) { return format == HfFormat::Release ? "release" : "transformers"; }

HfFormat parse_hf_format(const std::string& text, const std::string& what) {
  if (text == "release") return HfFormat::Release;
  if (text == "transformers") return HfFormat::Transformers;
  QUILL_FAIL("{}: '{}' is not a checkpoint form (release: the released checkpoint's names and multimodal config, "
             "for InklingForConditionalGeneration; transformers: InklingForCausalLM's names and text config)",
             what, text);
}

std::vector<CheckpointPart> checkpoint_parts(const Param& p, HfFormat format) {
  if (format == HfFormat::Release) return {CheckpointPart{p.name, p.shape, 0, p.gate_up_interleaved}};
  for (const auto& [release, hf] : kTopLevel)
    if (p.name == release) return {CheckpointPart{hf, p.shape, 0, false}};
  QUILL_CHECK(p.name.starts_with(kLayerPrefix), "parameter {} has no place in the transformers form", p.name);
  const size_t dot = p.name.find('.', std::char_traits<char>::length(kLayerPrefix));
  QUILL_CHECK(dot != std::string::npos, "parameter {} has no place in the transformers form", p.name);
  const std::string layer = "model.layers." + p.name.substr(std::char_traits<char>::length(kLayerPrefix),
                                                            dot - std::char_traits<char>::length(kLayerPrefix));
  const std::string suffix = p.name.substr(dot + 1);
  for (const auto& [release, hf] : kLayerSuffix)
    if (suffix == release) return {CheckpointPart{layer + "." + hf, p.shape, 0, false}};
  if (suffix == kDenseScale.first) return {CheckpointPart{layer + "." + kDenseScale.second, p.shape, 0, false}};
  for (const GateUp& g : kGateUp) {
    if (suffix != g.release) continue;
    QUILL_CHECK(p.shape.size() >= 2 && p.shape[p.shape.size() - 2] % 2 == 0,
                "parameter {}: gate/up tensor of shape {} needs an even dimension -2", p.name, shape_str(p.shape));
    if (*g.up == '\0') return {CheckpointPart{layer + "." + g.gate, p.shape, 0, false}};  // gate rows, then up rows
    Shape half = p.shape;
    half[half.size() - 2] /= 2;
    return {CheckpointPart{layer + "." + g.gate, half, 0, false},
            CheckpointPart{layer + "." + g.up, half, half[half.size() - 2], false}};
  }
  QUILL_FAIL("parameter {} has no place in the transformers form", p.name);
}

HfFormat detect_hf_format(const std::vector<std::string>& names) {
  bool transformers = false;
  for (const std::string& n : names) {
    if (n.starts_with("model.llm.")) return HfFormat::Release;
    if (starts_with_any(n, {"model.layers.", "model.embed_tokens.", "lm_head."})) transformers = true;
  }
  return transformers ? HfFormat::Transformers : HfFormat::Release;
}

bool is_short_conv(const Param& p) { return p.name.ends_with("sconv.weight"); }

bool is_release_f32(const Param& p) {
  return p.name.ends_with(".mlp.gate.bias") || p.name.ends_with(".mlp.gate.global_scale");
}

}  // namespace quill
