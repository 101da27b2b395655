// An --init checkpoint's tensors in the text model's names must all be the model's (io/hf_name_check.h):
// a layer past the config's last and a misspelled name are found in either form; MTP, vision and audio
// tensors pass.
#include "io/hf_name_check.h"

#include <gtest/gtest.h>

#include "io/hf_names.h"
#include "model/params.h"

namespace quill {
namespace {

InklingConfig tiny() { return load_inkling_config(std::string(QUILL_SOURCE_DIR) + "/configs/tiny.json"); }

std::vector<std::string> names_of(const InklingConfig& config, HfFormat format) {
  return checkpoint_tensor_names(config, format);
}

TEST(HfNameCheck, TheModelsOwnNamesAndOtherTowersPass) {
  for (HfFormat format : {HfFormat::Release, HfFormat::Transformers}) {
    std::vector<std::string> names = names_of(tiny(), format);
    names.push_back("model.mtp.0.input_proj.weight");
    names.push_back("model.vision.patch.weight");
    EXPECT_TRUE(unknown_text_tensors(names, tiny()).empty()) << hf_format_name(format);
  }
}

TEST(HfNameCheck, ALayerPastTheLastAndAMisspelledNameAreNamed) {
  std::vector<std::string> names = names_of(tiny(), HfFormat::Release);
  names.push_back("model.llm.layers.4.attn_norm.weight");
  names.push_back("model.llm.norm.wieght");
  EXPECT_EQ(unknown_text_tensors(names, tiny()),
            (std::vector<std::string>{"model.llm.layers.4.attn_norm.weight", "model.llm.norm.wieght"}));
  std::vector<std::string> hf = names_of(tiny(), HfFormat::Transformers);
  hf.push_back("model.layers.5.mlp.gate.weight");
  hf.push_back("lm_head.bias");
  EXPECT_EQ(unknown_text_tensors(hf, tiny()), (std::vector<std::string>{"lm_head.bias", "model.layers.5.mlp.gate.weight"}));
}

}  // namespace
}  // namespace quill
