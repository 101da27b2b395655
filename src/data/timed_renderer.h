// The data build's renderer over a tokenizer, or over a TimedTokenizer around it when the build
// is timed (--timing), shared by the JSONL and the Parquet builds.
#pragma once

#include <optional>

#include "data/build_rows.h"
#include "data/build_timing.h"
#include "data/chat_render.h"

namespace quill {

struct TimedRenderer {
  TimedRenderer(const Tokenizer& tokenizer, const BuildOptions& options)
      : timed(options.timing ? std::optional<TimedTokenizer>(std::in_place, tokenizer, *options.timing) : std::nullopt),
        renderer(timed ? *timed : tokenizer, RenderOptions{options.reasoning_effort}) {}
  TimedRenderer(const TimedRenderer&) = delete;  // the renderer refers to `timed`
  TimedRenderer& operator=(const TimedRenderer&) = delete;
  std::optional<TimedTokenizer> timed;
  ChatRenderer renderer;
};

}  // namespace quill
