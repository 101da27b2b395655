// `quill data ...`: build, inspect and check SFT rows, and use the tokenizer.
//   synth         the bundled synthetic set with the byte tokenizer (the demo)
//   build         conversations (JSONL, or Parquet files) -> rows (docs/data-build.md, docs/parquet.md)
//   inspect       a rows directory's manifest, verified, and one row shown with its loss mask
//   encode        UTF-8 text on stdin -> token ids as one JSON array
//   decode        a JSON array of ids on stdin -> text
//   bench-encode  tokenizer throughput on a file (MB/s), single- or multi-threaded
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <algorithm>

#include "base/error.h"
#include "base/file_util.h"
#include "base/timer.h"
#include "cli/commands.h"
#include "cli/staged_output_dir.h"
#include "data/bpe_tokenizer.h"
#include "data/build_rows.h"
#include "data/byte_tokenizer.h"
#include "data/conversation.h"
#include "data/ids_json.h"
#include "base/thread_pool.h"
#include "data/row_view.h"
#include "data/rows.h"
#include "data/synthetic.h"
#include "data/tokenizer_loader.h"
#include "recipe/recipe.h"

namespace quill::cli {

namespace {

// All of stdin, read in large blocks (an istreambuf_iterator over std::cin read it a character
// at a time through getc/ungetc: 60% of `data encode`'s time, perf, 2026-12-01).
std::string read_stdin() {
  std::string s;
  constexpr size_t kBlock = size_t{1} << 20;
  for (;;) {
    size_t old = s.size();
    s.resize(old + kBlock);
    size_t got = std::fread(s.data() + old, 1, kBlock, stdin);
    s.resize(old + got);
    if (got < kBlock) break;
  }
  QUILL_CHECK(!std::ferror(stdin), "stdin: read error");
  return s;
}

void write_stdout(std::string_view bytes) {
  QUILL_CHECK(std::fwrite(bytes.data(), 1, bytes.size(), stdout) == bytes.size() && std::fflush(stdout) == 0,
              "stdout: write error");
}

// SHA-256 of the ids as little-endian uint32 (what bench/tokenizer compares with tiktoken).
std::string ids_sha256(const std::vector<uint32_t>& ids) {
  return sha256_hex(std::string_view(reinterpret_cast<const char*>(ids.data()), ids.size() * 4));
}

// Replaces `ids` with the text's ids, reusing its storage; BPE tokenizers run in parallel.
void encode_into(const Tokenizer& tok, std::string_view text, const ParallelEncodeOptions& options,
                 std::vector<uint32_t>& ids) {
  if (const auto* bpe = dynamic_cast<const BpeTokenizer*>(&tok)) return bpe->encode_parallel(text, options, ids);
  ids.clear();
  tok.encode_append(text, ids);
}

nlohmann::json stats_json(const ParallelEncodeStats& s) {
  return {{"threads", s.threads},
          {"chunks", s.chunks},
          {"chunk_bytes", s.chunk_bytes},
          {"seconds", s.seconds},
          {"encode_s", s.encode_seconds},
          {"resize_s", s.resize_seconds},
          {"copy_s", s.copy_seconds},
          {"busy_s", s.busy_seconds},
          {"start_idle_s", s.start_idle_seconds},
          {"end_idle_s", s.end_idle_seconds}};
}

// The tokenizer a rows manifest names, or the one given on the command line.
std::unique_ptr<Tokenizer> manifest_tokenizer(const nlohmann::json& manifest, const std::string& path,
                                              const std::string& special) {
  const nlohmann::json tok = manifest.value("tokenizer", nlohmann::json::object());
  std::unique_ptr<Tokenizer> t;
  if (!path.empty()) {
    t = load_tokenizer(path, special);
  } else if (tok.value("name", "") == "quill-byte-v1" || tok.value("path", "") == "byte") {
    t = std::make_unique<ByteTokenizer>();
  } else {
    QUILL_CHECK(tok.contains("path"), "the manifest records no tokenizer path: pass --tokenizer");
    std::string p = tok.at("path").get<std::string>();
    QUILL_CHECK(path_exists(p), "{}: the manifest's tokenizer is not there: pass --tokenizer", p);
    t = load_tokenizer(p, tok.value("special_tokens", ""));
  }
  std::string want = tok.value("sha256", "");
  QUILL_CHECK(want.empty() || t->definition_sha256() == want,
              "tokenizer {} has sha256 {}, but the rows were built with {} (sha256 {})", t->name(),
              t->definition_sha256(), tok.value("name", "?"), want);
  return t;
}

constexpr const char* kValidFractionHelp =
    "hold out this fraction of the conversations (0 <= F < 1; the last floor(F x N) of the seeded order) as "
    "validation rows in OUT/valid, with a manifest of their own (quill train --valid-rows OUT/valid)";

}  // namespace

void add_data_commands(CLI::App& app, Runner& run) {
  CLI::App* data = app.add_subcommand("data", "build and inspect SFT rows; encode text");
  data->require_subcommand(1);

  // ---- synth
  CLI::App* synth = data->add_subcommand("synth", "render conversations (JSONL, or generated) with the byte tokenizer into rows");
  static std::string input, out;
  static int64_t conversations = 2000, row_tokens = 128, max_rows = -1;
  static uint64_t seed = 42;
  static double valid_fraction = 0;
  static bool overwrite = false;
  synth->add_option("--input", input, "conversations JSONL (default: generate --conversations of them)");
  synth->add_option("--conversations", conversations, "how many conversations to generate");
  synth->add_option("--seed", seed, "generation and packing seed");
  synth->add_option("--row-tokens", row_tokens, "tokens per row");
  synth->add_option("--max-rows", max_rows, "stop after this many rows");
  synth->add_option("--valid-fraction", valid_fraction, kValidFractionHelp);
  synth->add_option("--out", out, "output rows directory (refused when not empty, unless --overwrite)")->required();
  synth->add_flag("--overwrite", overwrite, "replace a non-empty --out (once the new rows are complete)");
  synth->callback([&run] {
    run = [] {
      check_valid_fraction(valid_fraction);
      StagedOutputDir out_dir(out, "--out", overwrite);
      nlohmann::json manifest;
      if (input.empty()) {
        manifest = build_synthetic_rows(out_dir.staging(), conversations, seed, row_tokens, max_rows, valid_fraction);
      } else {
        BuildOptions options;
        options.seed = seed;
        options.row_tokens = row_tokens;
        options.max_rows = max_rows;
        options.valid_fraction = valid_fraction;
        options.source = input;
        manifest = build_rows(read_conversations_jsonl(input), ByteTokenizer(), options, out_dir.staging());
      }
      out_dir.commit();
      std::printf("%s\n", manifest.dump(2).c_str());
      return 0;
    };
  });

  // ---- build
  CLI::App* build = data->add_subcommand("build", "conversations (JSONL or Parquet) -> Inkling-rendered, masked, packed rows");
  static std::vector<std::string> b_inputs;
  static std::string b_tokenizer, b_special, b_out, b_effort = "high", b_recipe;
  static int64_t b_row_tokens = 8192, b_max_rows = -1;
  static uint64_t b_seed = 42;
  static double b_valid_fraction = 0;
  static int b_threads = 0;
  static bool b_skip_invalid = false, b_quiet = false, b_timing = false, b_overwrite = false;
  build->add_option("--input", b_inputs,
                    "conversations: one JSONL file (one JSON object per line), or Parquet files (messages "
                    "list<struct<content, role>>, as Tulu 3), read in order (repeat --input or list them)")
      ->required();
  build->add_option("--recipe", b_recipe,
                    "check the Parquet input against this recipe's workload.dataset.build.parquet_sha256 (and "
                    "parquet_bytes) before building");
  build->add_option("--tokenizer", b_tokenizer, "tokenizer.json, a tiktoken rank file, or 'byte'")->required();
  build->add_option("--special-tokens", b_special, "for a rank file: inkling (default), o200k, none or a JSON file");
  build->add_option("--row-tokens", b_row_tokens, "tokens per row (8192)");
  build->add_option("--seed", b_seed, "permutation seed (42)");
  build->add_option("--max-rows", b_max_rows, "stop after this many rows (default: no limit)");
  build->add_option("--valid-fraction", b_valid_fraction, kValidFractionHelp);
  build->add_option("--reasoning-effort", b_effort, "none|minimal|low|medium|high|max or a number in [0, 0.99]");
  build->add_option("--threads", b_threads, "worker threads (default: all cores)");
  build->add_flag("--skip-invalid", b_skip_invalid, "skip and count bad lines instead of stopping");
  build->add_flag("--quiet", b_quiet, "no progress display");
  build->add_flag("--timing", b_timing,
                  "print where the time went (phases, serial fraction) to stderr, then the same as one JSON line "
                  "starting \"quill: data build timing \"");
  build->add_option("--out", b_out, "output rows directory (refused when not empty, unless --overwrite)")->required();
  build->add_flag("--overwrite", b_overwrite, "replace a non-empty --out (once the new rows are complete)");
  build->callback([&run] {
    run = [] {
      check_valid_fraction(b_valid_fraction);
      StagedOutputDir out_dir(b_out, "--out", b_overwrite);  // refused before the recipe and tokenizer load
      BuildOptions options;
      options.seed = b_seed;
      options.row_tokens = b_row_tokens;
      options.max_rows = b_max_rows;
      options.valid_fraction = b_valid_fraction;
      options.reasoning_effort = b_effort;
      std::string joined;
      for (const std::string& p : b_inputs) joined += (joined.empty() ? "" : ", ") + p;
      options.source = joined;
      if (!b_recipe.empty()) {
        const Recipe recipe = read_recipe(b_recipe);
        const auto& dataset = recipe.workload.dataset;
        const DatasetBuild* db = dataset && dataset->build ? &*dataset->build : nullptr;
        QUILL_CHECK(db && db->parquet_sha256 && !db->parquet_sha256->empty(),
                    "{}: the recipe records no workload.dataset.build.parquet_sha256 to check the input against",
                    b_recipe);
        options.expected_parquet_sha256 = *db->parquet_sha256;
        options.expected_parquet_bytes = db->parquet_bytes.value_or(-1);
        options.expected_from = "recipe " + b_recipe;
      }
      options.threads = b_threads;
      options.skip_invalid = b_skip_invalid;
      options.progress = !b_quiet;
      options.tokenizer_source = tokenizer_source_json(b_tokenizer, b_special);
      // The recipe is read above, before the tokenizer is loaded, so that a bad one fails at once.
      Timer timer;
      BuildTiming timing;
      std::unique_ptr<Tokenizer> tok = load_tokenizer(b_tokenizer, b_special, b_threads);
      // Read from the rank file's table file when it matches (docs/tokenizer.md, "Loading": about
      // 0.011 s), else built on the build's threads; a parallel phase either way: the serial
      // remainder (mapping the file, PCRE2's pattern, prefix sums) measured about 1 ms of 118 when
      // built here (1 -> 2 threads: 0.118 -> 0.055 s).
      timing.add_phase("tokenizer load", false, timer.seconds());
      if (b_timing) options.timing = &timing;
      nlohmann::json manifest = build_rows_from_inputs(b_inputs, *tok, options, out_dir.staging());
      out_dir.commit();
      double s = timer.seconds();
      if (b_timing) {
        int threads = b_threads > 0 ? b_threads : hardware_threads();
        std::fprintf(stderr, "%s", timing.table(threads, s).c_str());
        std::fprintf(stderr, "quill: data build timing %s\n", timing.to_json(threads, s).dump().c_str());
      }
      double mb = manifest["input"]["bytes"].get<double>() / 1e6;
      std::printf("%s\n", manifest.dump(2).c_str());
      std::fprintf(stderr, "quill: data build: %lld rows in %s, %.1f MB of input in %.2f s (%.1f MB/s end to end)\n",
                   static_cast<long long>(manifest["rows"].get<int64_t>()), b_out.c_str(), mb, s, mb / s);
      return 0;
    };
  });

  // ---- inspect
  CLI::App* inspect = data->add_subcommand("inspect", "print a rows directory's manifest (verified) and show a row with its mask");
  static std::string dir, i_tokenizer, i_special, i_color = "auto";
  static int64_t i_row = 0, i_tokens = 2048;
  static bool i_manifest_only = false;
  inspect->add_option("dir", dir, "rows directory")->required();
  inspect->add_option("--tokenizer", i_tokenizer, "decode with this tokenizer (default: the one the manifest records)");
  inspect->add_option("--special-tokens", i_special, "with --tokenizer: as for build");
  inspect->add_option("--row", i_row, "the row to show (0)");
  inspect->add_option("--tokens", i_tokens, "show the first this many tokens of the row (0: all; default 2048)");
  inspect->add_option("--color", i_color, "auto|always|never: supervised tokens in green, else in [[ ]]");
  inspect->add_flag("--manifest-only", i_manifest_only, "print the manifest only");
  inspect->callback([&run] {
    run = [] {
      RowsReader rows = RowsReader::open(dir, /*verify_sha256=*/true);
      std::printf("%s\n", rows.manifest().dump(2).c_str());
      if (i_manifest_only) return 0;
      QUILL_CHECK(i_row >= 0 && i_row < rows.rows(), "--row {}: the rows directory has rows 0..{}", i_row, rows.rows() - 1);
      QUILL_CHECK(i_color == "auto" || i_color == "always" || i_color == "never", "--color {}: expected auto, always or never",
                  i_color);
      std::unique_ptr<Tokenizer> tok = manifest_tokenizer(rows.manifest(), i_tokenizer, i_special);
      size_t n = static_cast<size_t>(i_tokens > 0 ? std::min(i_tokens, rows.row_tokens()) : rows.row_tokens());
      bool color = i_color == "always" || (i_color == "auto" && ::isatty(STDOUT_FILENO));
      std::string text = render_row_for_reading(*tok, {rows.tokens(i_row), n}, {rows.mask(i_row), n}, color);
      std::printf("\n--- row %lld: first %zu of %lld tokens, %lld supervised targets; supervised text %s ---\n%s\n",
                  static_cast<long long>(i_row), n, static_cast<long long>(rows.row_tokens()),
                  static_cast<long long>(rows.supervised_targets(i_row)), color ? "in green" : "in [[ ]]", text.c_str());
      return 0;
    };
  });

  // ---- encode / decode
  CLI::App* encode = data->add_subcommand("encode", "UTF-8 text on stdin -> token ids as one JSON array on stdout");
  static std::string e_tokenizer, e_special;
  static int e_threads = 0;
  encode->add_option("--tokenizer", e_tokenizer, "tokenizer.json, a tiktoken rank file, or 'byte'")->required();
  encode->add_option("--special-tokens", e_special, "for a rank file: inkling (default), o200k, none or a JSON file");
  encode->add_option("--threads", e_threads, "threads (default: all cores; the ids do not depend on it)");
  encode->callback([&run] {
    run = [] {
      QUILL_CHECK(e_threads >= 0, "--threads {}: expected 0 (all cores) or more", e_threads);
      std::unique_ptr<Tokenizer> tok = load_tokenizer(e_tokenizer, e_special, e_threads);
      std::string text = read_stdin();
      ParallelEncodeOptions options;
      options.threads = e_threads;
      std::vector<uint32_t> ids;
      encode_into(*tok, text, options, ids);
      std::string json = ids_json(ids);
      json += '\n';
      write_stdout(json);
      return 0;
    };
  });
  CLI::App* decode = data->add_subcommand("decode", "a JSON array of token ids on stdin -> text on stdout");
  static std::string d_tokenizer, d_special;
  decode->add_option("--tokenizer", d_tokenizer, "tokenizer.json, a tiktoken rank file, or 'byte'")->required();
  decode->add_option("--special-tokens", d_special, "for a rank file: inkling (default), o200k, none or a JSON file");
  decode->callback([&run] {
    run = [] {
      std::unique_ptr<Tokenizer> tok = load_tokenizer(d_tokenizer, d_special);
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(read_stdin());
      } catch (const nlohmann::json::parse_error& e) {
        QUILL_FAIL("stdin: malformed JSON ({})", e.what());
      }
      QUILL_CHECK(j.is_array(), "stdin: expected a JSON array of token ids");
      std::vector<uint32_t> ids;
      for (const auto& v : j) {
        QUILL_CHECK(v.is_number_unsigned() && v.get<uint64_t>() < (1ull << 32), "stdin: {} is not a token id", v.dump());
        ids.push_back(v.get<uint32_t>());
      }
      std::string text = tok->decode(ids);
      std::fwrite(text.data(), 1, text.size(), stdout);
      return 0;
    };
  });

  // ---- bench-encode
  CLI::App* bench = data->add_subcommand("bench-encode", "tokenizer throughput on a file: one JSON line with MB/s");
  static std::string x_tokenizer, x_special, x_input;
  static int x_threads = 1, x_repeat = 3;
  static std::string x_warm_up = "input";
  static size_t x_chunk_kb = 0;
  static bool x_fresh = false;
  bench->add_option("--tokenizer", x_tokenizer, "tokenizer.json, a tiktoken rank file, or 'byte'")->required();
  bench->add_option("--special-tokens", x_special, "for a rank file: inkling (default), o200k, none or a JSON file");
  bench->add_option("--input", x_input, "text file (read as bytes)")->required();
  bench->add_option("--threads", x_threads, "threads (1; 0 = all cores)");
  bench->add_option("--repeat", x_repeat, "timed runs after one warm-up; the median is reported (3)");
  bench->add_option("--warm-up", x_warm_up,
                    "input: encode the input once, then time --repeat runs of it (a hot cache: the same text "
                    "again); none: time the first encode of this process, once (cold); FILE: encode FILE once, "
                    "then time one pass over the input (warm: after different text)");
  bench->add_option("--chunk-kb", x_chunk_kb, "parallel chunk size in KiB (0: automatic)");
  bench->add_flag("--fresh-output", x_fresh,
                  "a new id vector each run, the previous one freed inside the timed region (v6's timing) "
                  "instead of one vector reused");
  bench->callback([&run, bench] {
    run = [bench] {
      std::unique_ptr<Tokenizer> tok = load_tokenizer(x_tokenizer, x_special);
      std::string text = read_file(x_input);
      int threads = x_threads > 0 ? x_threads : hardware_threads();
      ParallelEncodeStats stats;
      ParallelEncodeOptions options;
      options.threads = threads;
      options.chunk_bytes = x_chunk_kb * 1024;
      options.stats = &stats;
      const bool hot = x_warm_up == "input";
      QUILL_CHECK(hot || x_repeat == 1 || bench->count("--repeat") == 0,
                  "--repeat {}: with --warm-up {} exactly one pass is timed (a second would be over text seen "
                  "before)",
                  x_repeat, x_warm_up);
      std::vector<uint32_t> ids;
      double warm_up_s = 0;
      size_t warm_up_bytes = 0;
      if (hot) {
        encode_into(*tok, text, options, ids);
      } else if (x_warm_up != "none") {
        QUILL_CHECK(path_exists(x_warm_up), "--warm-up {}: no such file (input, none, or a text file)", x_warm_up);
        std::string other = read_file(x_warm_up);
        Timer t;
        encode_into(*tok, other, options, ids);
        warm_up_s = t.seconds();
        warm_up_bytes = other.size();
      }
      std::vector<std::pair<double, ParallelEncodeStats>> runs;
      for (int r = 0; r < (hot ? std::max(1, x_repeat) : 1); ++r) {
        Timer t;
        if (x_fresh) {
          std::vector<uint32_t> fresh;
          encode_into(*tok, text, options, fresh);
          ids = std::move(fresh);  // frees the previous run's ids inside the timed region, as v6 did
        } else {
          encode_into(*tok, text, options, ids);
        }
        runs.emplace_back(t.seconds(), stats);
      }
      std::vector<double> times;
      for (const auto& run : runs) times.push_back(run.first);
      std::sort(runs.begin(), runs.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      const auto& [median, median_stats] = runs[runs.size() / 2];
      nlohmann::json result = {{"tokenizer", tok->name()},     {"input", x_input},
                               {"bytes", text.size()},         {"tokens", ids.size()},
                               {"threads", threads},           {"seconds", median},
                               {"seconds_all", times},         {"mb_per_s", static_cast<double>(text.size()) / 1e6 / median},
                               {"fresh_output", x_fresh},      {"ids_sha256", ids_sha256(ids)},
                               {"warm_up", hot ? "input" : x_warm_up == "none" ? "none" : "file"}};
      if (warm_up_bytes > 0) result["warm_up_file"] = {{"path", x_warm_up}, {"bytes", warm_up_bytes}, {"seconds", warm_up_s}};
      if (const auto* bpe = dynamic_cast<const BpeTokenizer*>(tok.get())) {
        const BpeCacheSizes& c = bpe->core().cache_sizes();
        result["caches"] = {{"front_entries", c.front_entries}, {"pair_slots", c.pair_slots}, {"piece_slots", c.piece_slots}};
        result["parallel"] = stats_json(median_stats);  // of the median run
      }
      std::printf("%s\n", result.dump().c_str());
      return 0;
    };
  });
}

}  // namespace quill::cli
