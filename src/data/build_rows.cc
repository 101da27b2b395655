#include "data/build_rows.h"

#include "data/chat_render.h"
#include "data/packing.h"

namespace quill {

nlohmann::json build_rows(const std::vector<Conversation>& conversations, const Tokenizer& tokenizer,
                          const BuildOptions& options, const std::string& out_dir) {
  ChatRenderer renderer(tokenizer, RenderOptions{options.reasoning_effort});
  std::vector<MaskedTokens> rendered;
  rendered.reserve(conversations.size());
  for (const Conversation& c : conversations) rendered.push_back(renderer.render(c));

  nlohmann::json extras = {
      {"tokenizer",
       {{"name", tokenizer.name()}, {"sha256", tokenizer.definition_sha256()}, {"vocab_size", tokenizer.vocab_size()}}},
      {"renderer", kRendererName},
      {"renderer_version", kRendererVersion},
      {"template_kwargs", renderer.template_kwargs()},
      {"source", options.source},
  };
  PackOptions pack{options.seed, options.row_tokens, options.max_rows};
  return write_packed_rows(out_dir, rendered, pack, extras);
}

}  // namespace quill
