// Every key an Inkling text config may hold, with transformers' default and what quill does with it.
//
// The defaults are those of transformers 5.17.0, models/inkling/configuration_inkling.py
// (`InklingTextConfig`); tests/fixtures/hf/defaults/text_config.json is that class's own dump and
// config_test.cc checks this table against it. The rule (docs/config.md): an omitted key takes
// transformers' default, so quill builds the model transformers builds from the same file; a value
// quill does not implement is refused by name. Keys the release's config.json uses and transformers
// does not declare are listed with the value quill implements as their "default".
#pragma once

#include <span>
#include <string_view>

namespace quill {

enum class KeyUse {
  kModel,    // read into InklingConfig (a dimension, a constant of the math, the layer pattern)
  kOnly,     // quill implements one value, the default; any other value is refused by name
  kIgnored,  // changes nothing quill computes, and transformers' model does not read it either
};

struct ConfigKey {
  std::string_view name;
  std::string_view default_json;  // the default as JSON text; "null" for Python's None
  KeyUse use;
  std::string_view note;          // why (kOnly: what quill implements; kIgnored: why it is safe)
};

// The keys of InklingTextConfig (and its PreTrainedConfig base) in transformers 5.17.0.
std::span<const ConfigKey> transformers_text_keys();
// Keys of the release's text_config that transformers does not declare (inkling-small release,
// SGLang's InklingModelConfig), with the value quill implements.
std::span<const ConfigKey> release_text_keys();
// One of the above by name; nullptr if neither knows it.
const ConfigKey* find_config_key(std::string_view name);

// transformers' attribute_map: a second spelling of a key (`sconv_kernel_size` for `conv_kernel_size`).
struct KeyAlias {
  std::string_view alias, key;
};
std::span<const KeyAlias> config_key_aliases();

}  // namespace quill
