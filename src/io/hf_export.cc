#include "io/hf_export.h"

#include <fmt/format.h>

#include <array>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/file_util.h"

namespace quill {

namespace {

using ordered = nlohmann::ordered_json;

// A config source: the file and its JSON (null when there is none).
struct ConfigSource {
  std::string file;
  ordered json;
  bool multimodal() const { return json.is_object() && json.contains("text_config"); }
};

ConfigSource read_config_source(const std::string& path) {
  ConfigSource s;
  if (path.empty()) return s;
  s.file = path_exists(path + "/config.json") ? path + "/config.json" : path;
  if (!path_exists(s.file)) return {};
  try {
    s.json = ordered::parse(read_file(s.file));
  } catch (const nlohmann::json::exception& e) {
    QUILL_FAIL("{}: not valid JSON ({})", s.file, e.what());
  }
  QUILL_CHECK(s.json.is_object(), "{}: a config must be a JSON object", s.file);
  return s;
}

const char* dtype_key_value(DType dtype) { return dtype == DType::F32 ? "float32" : "bfloat16"; }

// The trained model's text config in transformers' schema, without the keys that belong to the
// file around it (architectures, dtype).
ordered text_config_json(const InklingConfig& config) {
  ordered j = ordered::parse(config_to_hf_json(config));
  j.erase("architectures");
  j.erase("torch_dtype");
  return j;
}

// Whether a config (text or multimodal) describes the same model as `config`.
bool same_model(const ConfigSource& s, const InklingConfig& config) {
  try {
    return config_to_hf_json(parse_inkling_config(s.json.dump(), s.file)) == config_to_hf_json(config);
  } catch (const Error&) {
    return false;
  }
}

// Keys transformers' InklingTextConfig reads that quill does not model, carried from the source into
// the transformers form (modeling_inkling.py / configuration_inkling.py use them; their meaning is
// the same in both schemas). "model_max_length" is the release's name of max_position_embeddings.
constexpr std::array<const char*, 5> kCarriedTextKeys = {"bos_token_id", "eos_token_id", "max_position_embeddings",
                                                         "rms_norm_eps_moe_gate", "initializer_range"};

void carry_keys(const ordered& from, ordered& to) {
  if (!from.is_object()) return;
  for (const char* k : kCarriedTextKeys)
    if (from.contains(k) && !to.contains(k)) to[k] = from[k];
  if (from.contains("model_max_length") && !to.contains("max_position_embeddings"))
    to["max_position_embeddings"] = from["model_max_length"];
}

std::string transformers_config(const InklingConfig& config, const ConfigSource& source, DType dtype) {
  ordered j;
  j["architectures"] = {"InklingForCausalLM"};
  const ordered text = text_config_json(config);
  for (auto it = text.begin(); it != text.end(); ++it) j[it.key()] = it.value();
  j["model_type"] = "inkling_text";
  if (source.multimodal()) {
    carry_keys(source.json["text_config"], j);
    carry_keys(source.json, j);  // the release keeps eos_token_id at the top level
  } else {
    carry_keys(source.json, j);
  }
  j["dtype"] = dtype_key_value(dtype);
  return j.dump(2) + "\n";
}

std::string release_config(const InklingConfig& config, const ConfigSource& source, DType dtype,
                           std::vector<std::string>& notes) {
  ordered j = source.json;
  if (!same_model(source, config)) {
    j["text_config"] = text_config_json(config);
    notes.push_back(fmt::format(
        "{}'s text_config does not describe the trained model (--config changed it): the export's text_config is "
        "the trained model's, in transformers' schema",
        source.file));
  }
  // Every dtype key says what the tensors are (transformers 5 reads "dtype", older files "torch_dtype").
  const char* value = dtype_key_value(dtype);
  j["dtype"] = value;
  if (j.contains("torch_dtype")) j["torch_dtype"] = value;
  ordered& text = j["text_config"];
  for (const char* k : {"dtype", "torch_dtype"})
    if (text.is_object() && text.contains(k)) text[k] = value;
  return j.dump(2) + "\n";
}

}  // namespace

DType parse_hf_export_dtype(const std::string& text, const std::string& what) {
  if (text == "bf16") return DType::BF16;
  if (text == "fp32") return DType::F32;
  QUILL_FAIL("{}: '{}' is not an export dtype (bf16, as released, or fp32)", what, text);
}

HfExportPlan plan_hf_export(const InklingConfig& config, const std::string& init_dir, const std::string& config_path,
                            const HfExportOptions& options) {
  QUILL_CHECK(options.dtype == DType::BF16 || options.dtype == DType::F32, "--save-hf-dtype: {} is not bf16 or fp32",
              dtype_name(options.dtype));
  HfExportPlan plan;
  plan.dtype = options.dtype;
  plan.source_dir = init_dir;
  const ConfigSource init = read_config_source(init_dir);
  const ConfigSource given = read_config_source(config_path);
  plan.format = options.format.value_or(init.multimodal() ? HfFormat::Release : HfFormat::Transformers);

  if (plan.format == HfFormat::Transformers) {
    // The config the run was built from: --config's, else --init's.
    const ConfigSource& source = given.json.is_object() ? given : init;
    plan.config_json = transformers_config(config, source, plan.dtype);
    return plan;
  }
  const ConfigSource* source = init.multimodal() ? &init : given.multimodal() ? &given : nullptr;
  if (source == nullptr) {
    const std::string from = !init_dir.empty() ? fmt::format("--init {}'s config.json ({}) is a text config", init_dir,
                                                             init.file.empty() ? "none" : init.file)
                                               : fmt::format("a random init from --config {}, a text config", config_path);
    QUILL_FAIL("--hf-format release: the release form's config.json is the multimodal InklingConfig (text_config "
               "with the vision and audio towers' configs), and {}: there are no tower configs to write. Start from "
               "a release checkpoint (--init DIR whose config.json has text_config) or export with --hf-format "
               "transformers (InklingForCausalLM)",
               from);
  }
  if (source == &given && !init_dir.empty())
    plan.notes.push_back(fmt::format("the release config.json comes from --config {} ({}'s is a text config)",
                                     given.file, init_dir));
  if (init_dir.empty())
    plan.notes.push_back(fmt::format(
        "random init: the export has no vision/audio tower tensors; InklingForConditionalGeneration reports them "
        "missing and draws them at random (the text model loads completely)"));
  plan.config_json = release_config(config, *source, plan.dtype, plan.notes);
  return plan;
}

DType hf_export_dtype(const Param& p, HfFormat format, DType dtype) {
  if (dtype == DType::F32) return DType::F32;
  if (is_release_f32(p)) return DType::F32;
  if (format == HfFormat::Transformers && is_short_conv(p)) return DType::F32;
  return DType::BF16;
}

SaveReport write_hf_export(const HfExportPlan& plan, const std::string& out_dir, const ParamTable& table,
                           bool show_progress) {
  SaveOptions save;
  save.overwrite = true;
  save.show_progress = show_progress;
  save.format = plan.format;
  save.max_shard_bytes = plan.max_shard_bytes;
  const HfFormat format = plan.format;
  const DType dtype = plan.dtype;
  save.dtype_of = [format, dtype](const Param& p) { return hf_export_dtype(p, format, dtype); };
  return save_hf_checkpoint(out_dir, table, plan.source_dir, plan.config_json, save);
}

}  // namespace quill
