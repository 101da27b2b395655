#include "ops/fp8_options.h"

#include "base/error.h"

namespace quill::ops {

Fp8Options parse_fp8_options(const std::string& format, const std::string& recipe, bool no_fp8_wgrad) {
  Fp8Options o;
  QUILL_CHECK(!no_fp8_wgrad || !format.empty(), "--no-fp8-wgrad needs FP8 training (--fp8-format e4m3 --fp8-recipe "
              "blockwise): without it every weight gradient is in the backend's precision already");
  if (format.empty() && recipe.empty()) return o;
  QUILL_CHECK(!format.empty(), "--fp8-recipe {} needs --fp8-format e4m3 (FP8 training is on only with a format, as in "
              "Megatron)", recipe);
  QUILL_CHECK(format == "e4m3", "--fp8-format {}: quill implements e4m3 only (the blockwise recipe keeps E4M3 for the "
              "gradients too; hybrid's E5M2 gradients are not implemented)", format);
  QUILL_CHECK(!recipe.empty(), "--fp8-format e4m3 without --fp8-recipe: Megatron's default recipe is delayed, which quill "
              "does not implement; give --fp8-recipe blockwise");
  QUILL_CHECK(recipe == "blockwise", "--fp8-recipe {}: quill implements blockwise only (1x128 activation and gradient "
              "tiles, 128x128 weight blocks; docs/fp8.md)", recipe);
  o.blockwise_e4m3 = true;
  o.wgrad = !no_fp8_wgrad;
  return o;
}

}  // namespace quill::ops
