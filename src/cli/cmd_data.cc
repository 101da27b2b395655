// `quill data synth` and `quill data inspect`: the bundled synthetic SFT rows, and a look at a rows
// directory. (The real tokenizer and `quill data build` come with the data issue.)
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "data/build_rows.h"
#include "data/byte_tokenizer.h"
#include "data/conversation.h"
#include "data/rows.h"
#include "data/synthetic.h"

namespace quill::cli {

void add_data_commands(CLI::App& app, Runner& run) {
  CLI::App* data = app.add_subcommand("data", "build and inspect SFT rows");
  data->require_subcommand(1);

  CLI::App* synth = data->add_subcommand("synth", "render conversations (JSONL, or generated) with the byte tokenizer into rows");
  static std::string input, out;
  static int64_t conversations = 2000, row_tokens = 128, max_rows = -1;
  static uint64_t seed = 42;
  synth->add_option("--input", input, "conversations JSONL (default: generate --conversations of them)");
  synth->add_option("--conversations", conversations, "how many conversations to generate");
  synth->add_option("--seed", seed, "generation and packing seed");
  synth->add_option("--row-tokens", row_tokens, "tokens per row");
  synth->add_option("--max-rows", max_rows, "stop after this many rows");
  synth->add_option("--out", out, "output rows directory")->required();
  synth->callback([&run] {
    run = [] {
      nlohmann::json manifest;
      if (input.empty()) {
        manifest = build_synthetic_rows(out, conversations, seed, row_tokens, max_rows);
      } else {
        BuildOptions options;
        options.seed = seed;
        options.row_tokens = row_tokens;
        options.max_rows = max_rows;
        options.source = input;
        manifest = build_rows(read_conversations_jsonl(input), ByteTokenizer(), options, out);
      }
      std::printf("%s\n", manifest.dump(2).c_str());
      return 0;
    };
  });

  CLI::App* inspect = data->add_subcommand("inspect", "print a rows directory's manifest (and verify its hash)");
  static std::string dir;
  inspect->add_option("dir", dir, "rows directory")->required();
  inspect->callback([&run] {
    run = [] {
      RowsReader rows = RowsReader::open(dir, /*verify_sha256=*/true);
      std::printf("%s\n", rows.manifest().dump(2).c_str());
      return 0;
    };
  });
}

}  // namespace quill::cli
