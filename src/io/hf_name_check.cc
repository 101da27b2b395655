#include "io/hf_name_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "base/error.h"
#include "io/checkpoint_dir.h"
#include "io/hf_names.h"
#include "model/params.h"

namespace quill {

namespace {

bool in_text_namespace(const std::string& name, HfFormat format) {
  if (format == HfFormat::Release) return name.starts_with("model.llm.");
  for (const char* prefix : {"model.layers.", "model.embed_tokens.", "model.embed_norm.", "model.norm.", "lm_head."})
    if (name.starts_with(prefix)) return true;
  return false;
}

}  // namespace

std::vector<std::string> checkpoint_tensor_names(const InklingConfig& config, HfFormat format) {
  std::vector<std::string> names;
  for (const ParamDecl& d : param_decls(config)) {
    Param p;
    p.name = d.name;
    p.shape = d.shape;
    p.gate_up_interleaved = d.gate_up_interleaved;
    for (const CheckpointPart& part : checkpoint_parts(p, format)) names.push_back(part.name);
  }
  return names;
}

std::vector<std::string> unknown_text_tensors(const std::vector<std::string>& names, const InklingConfig& config) {
  const HfFormat format = detect_hf_format(names);
  const std::vector<std::string> all = checkpoint_tensor_names(config, format);
  const std::set<std::string> known(all.begin(), all.end());
  std::vector<std::string> unknown;
  for (const std::string& n : names)
    if (in_text_namespace(n, format) && !known.count(n)) unknown.push_back(n);
  std::sort(unknown.begin(), unknown.end());
  return unknown;
}

void check_no_unknown_text_tensors(const std::string& dir, const InklingConfig& config) {
  const std::vector<std::string> unknown = unknown_text_tensors(CheckpointDir::open(dir).names(), config);
  if (unknown.empty()) return;
  std::string list;
  for (size_t i = 0; i < unknown.size() && i < 5; ++i) list += (i ? ", " : "") + unknown[i];
  if (unknown.size() > 5) list += fmt::format(" and {} more", unknown.size() - 5);
  QUILL_FAIL("{}: {} tensor{} in the text model's names that {} model has no place for: {} (a checkpoint of another "
             "model, or misspelled names; {} has num_hidden_layers {})",
             dir, unknown.size(), unknown.size() > 1 ? "s" : "", config.source.empty() ? "this" : config.source + "'s",
             list, config.source.empty() ? "the config" : config.source, config.num_layers);
}

}  // namespace quill
