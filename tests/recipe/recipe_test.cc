// The recipe model: the seed parses unchanged into typed fields, and write -> read gives an equal
// model with every field (typed or not) kept, in order, with the seed's spelling where unchanged.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <sstream>

#include "base/error.h"
#include "base/file_util.h"
#include "recipe/recipe.h"
#include "recipe/yaml_util.h"
#include "recipe_test_util.h"

namespace quill {
namespace {

TEST(Recipe, SeedParsesIntoTypedFields) {
  Recipe r = read_recipe(test::seed_path());
  EXPECT_EQ(r.schema_version, 1);
  EXPECT_EQ(r.model, "Inkling-Small");
  EXPECT_EQ(r.gpu.type, "H200");
  EXPECT_EQ(r.gpu.memory_gb, 141);
  EXPECT_EQ(r.gpu.count, 32);
  EXPECT_EQ(r.gpu.per_node, 8);
  EXPECT_EQ(r.gpu.instance, "AWS p5en.48xlarge");
  ASSERT_TRUE(r.author);
  EXPECT_EQ(r.author->name, "ATTUNE");
  EXPECT_EQ(r.status, "verified");
  EXPECT_EQ(r.workload.row_tokens, 8192);
  EXPECT_EQ(r.workload.global_batch, 128);
  EXPECT_EQ(r.workload.precision, "bf16");
  ASSERT_TRUE(r.workload.dataset && r.workload.dataset->build);
  EXPECT_EQ(r.workload.dataset->source, "allenai/tulu-3-sft-mixture");
  EXPECT_EQ(r.workload.dataset->build->rows, 6400);
  EXPECT_EQ(r.workload.dataset->build->seed, 42);
  EXPECT_DOUBLE_EQ(*r.workload.dataset->build->supervised_token_ratio, 0.663);
  EXPECT_EQ(r.workload.dataset->build->parquet_bytes, 73787266);
  const RecipeLayout& L = r.layout;
  EXPECT_EQ(L.label, "TP4 PP4 EP8 DP2");
  EXPECT_EQ(L.tp, 4);
  EXPECT_EQ(L.pp, 4);
  EXPECT_EQ(L.vpp, 1);
  EXPECT_EQ(L.cp, 1);
  EXPECT_EQ(L.ep, 8);
  EXPECT_EQ(L.etp, 1);
  EXPECT_EQ(L.dp, 2);
  EXPECT_TRUE(L.sequence_parallel);
  ASSERT_TRUE(L.layer_split);
  EXPECT_EQ(L.layer_split->first, 12);
  EXPECT_EQ(L.layer_split->last, 10);
  EXPECT_FALSE(L.max_tokens_per_gpu);
  EXPECT_EQ(L.rows_per_microbatch, 1);
  EXPECT_FALSE(L.recompute);
  ASSERT_TRUE(L.offload);
  EXPECT_DOUBLE_EQ(*L.offload->optimizer_fraction, 0.7);
  EXPECT_EQ(L.offload->overlap_d2h_h2d, true);
  EXPECT_EQ(L.dispatcher, "alltoall");
  ASSERT_TRUE(r.result);
  EXPECT_DOUBLE_EQ(*r.result->tokens_per_s_per_gpu, 616.67);
  EXPECT_DOUBLE_EQ(*r.result->usd_per_million_tokens, 3.56);
  EXPECT_DOUBLE_EQ(*r.result->step_time_cv_percent, 5.23);
  EXPECT_DOUBLE_EQ(*r.result->mfu, 0.0418);
  EXPECT_FALSE(r.result->mfu_note);
  EXPECT_EQ(r.result->active_params->count, 11173191680);
  EXPECT_EQ(r.result->measured, "2026-10-21");
  EXPECT_EQ(r.result->steps_per_run, 20);
  EXPECT_EQ(r.result->window, (std::vector<int64_t>{5, 19}));
  EXPECT_EQ(r.result->window_tokens, 15728640);
  EXPECT_EQ(r.result->profiler, false);
  EXPECT_DOUBLE_EQ(*r.result->gpu_hours, 12.84);
  ASSERT_TRUE(r.correctness && r.correctness->convergence);
  EXPECT_EQ(r.correctness->result, "pass");
  EXPECT_DOUBLE_EQ(*r.correctness->convergence->correlation, 0.999955);
  EXPECT_EQ(r.correctness->convergence->pointwise_failures, 0);
  ASSERT_EQ(r.env.size(), 10u);
  EXPECT_EQ(r.env[0], (std::pair<std::string, std::string>{"CUDA_DEVICE_MAX_CONNECTIONS", "1"}));
  EXPECT_EQ(r.env[6].second, "$KERNEL_CACHE/triton");
  ASSERT_TRUE(r.patches);
  EXPECT_EQ(r.patches->node.size(), 0u);
  EXPECT_EQ(r.run.rfind("export CUDA_DEVICE_MAX_CONNECTIONS=1\n", 0), 0u);
  EXPECT_NE(r.run.find("--distributed-timeout-minutes 30\n"), std::string::npos);
  EXPECT_EQ(r.notes.rfind("- Starting point:", 0), 0u);
  EXPECT_EQ(r.leading_comment.rfind("# recipes/inkling-small/h200/", 0), 0u);
}

TEST(Recipe, SeedRoundTripsToAnEqualModel) {
  Recipe a = read_recipe(test::seed_path());
  const std::string path = test::temp_path("seed-roundtrip.yaml");
  write_recipe(path, a);
  Recipe b = read_recipe(path);
  EXPECT_TRUE(a == b);
  EXPECT_TRUE(static_cast<const RecipeFields&>(a) == static_cast<const RecipeFields&>(b));
  EXPECT_TRUE(yaml_equal(a.doc, b.doc)) << "the written document differs from the seed's";
  EXPECT_EQ(a.leading_comment, b.leading_comment);
  // Written twice, the text is stable.
  EXPECT_EQ(recipe_to_yaml(a), recipe_to_yaml(b));
  // No temporary file left beside it.
  for (const auto& e : std::filesystem::directory_iterator(std::filesystem::path(path).parent_path()))
    EXPECT_EQ(e.path().filename().string().find("seed-roundtrip.yaml.tmp"), std::string::npos) << e.path();
  std::filesystem::remove(path);
}

TEST(Recipe, WrittenTextKeepsTheSeedsNamesSpellingAndOrder) {
  Recipe a = read_recipe(test::seed_path());
  const std::string text = recipe_to_yaml(a);
  // Quoted strings stay strings, dates stay plain, nulls are `null`, the run is a literal block.
  EXPECT_NE(text.find("cuda: '13.0'"), std::string::npos);
  EXPECT_NE(text.find("CUDA_DEVICE_MAX_CONNECTIONS: '1'"), std::string::npos);
  EXPECT_NE(text.find("measured: 2026-10-21\n"), std::string::npos);
  EXPECT_NE(text.find("max_tokens_per_gpu: null"), std::string::npos);
  EXPECT_NE(text.find("recompute: null"), std::string::npos);
  EXPECT_NE(text.find("mfu: 0.0418"), std::string::npos);
  EXPECT_NE(text.find("step_time_cv_percent: 5.23"), std::string::npos);
  EXPECT_NE(text.find("run: |\n  export CUDA_DEVICE_MAX_CONNECTIONS=1\n"), std::string::npos);
  EXPECT_NE(text.find("patches: []"), std::string::npos);
  EXPECT_EQ(text.find("\n\nnotes:"), std::string::npos) << "a literal block left a blank line behind";
  EXPECT_NE(text.find("RDMA=1\n\n  MODEL_ARGS_LINE="), std::string::npos) << "a blank line inside the run is text";
  // Top-level keys in the seed's order.
  size_t last = 0;
  for (const char* key : {"schema_version:", "model:", "gpu:", "author:", "status:", "stack:", "workload:",
                          "layout:", "result:", "correctness:", "env:", "patches:", "run:", "notes:"}) {
    size_t at = text.find(std::string("\n") + key);
    ASSERT_NE(at, std::string::npos) << key;
    EXPECT_GT(at, last) << key;
    last = at;
  }
}

TEST(Recipe, UnknownFieldsSurviveInPlace) {
  std::string text = read_file(test::seed_path());
  test::replace_once(text, "layout:\n  label:", "layout:\n  custom_knob: {a: 1, b: [x, y]}\n  label:");
  text += "extra_section:\n  owner: someone\n  tags: [one, two]\n";
  Recipe a = parse_recipe(text, "custom.yaml");
  Recipe b = parse_recipe(recipe_to_yaml(a), "custom2.yaml");
  EXPECT_TRUE(a == b);
  const std::string out = recipe_to_yaml(b);
  size_t layout = out.find("\nlayout:\n");
  ASSERT_NE(layout, std::string::npos);
  EXPECT_EQ(out.find("  custom_knob:", layout), layout + 9) << out.substr(layout, 200);
  EXPECT_NE(out.find("extra_section:\n  owner: someone"), std::string::npos);
}

TEST(Recipe, ChangedTypedFieldsAreWrittenAndReadBack) {
  Recipe a = read_recipe(test::seed_path());
  a.layout.tp = 8;
  a.layout.pp = 2;
  a.layout.layer_split->first = 20;
  a.layout.layer_split->last = 22;
  a.layout.offload->optimizer_fraction = 1.0;
  a.layout.recompute = Recompute{"full", "uniform", 1};
  a.layout.max_tokens_per_gpu = 16384;
  a.result->mfu_note = "13.0";  // a string that reads as a number must stay a string
  a.result->mfu = 1e-5;
  a.env.emplace_back("NEW_VAR", "true");
  a.correctness.reset();
  Recipe b = parse_recipe(recipe_to_yaml(a), "changed.yaml");
  EXPECT_TRUE(a == b);
  EXPECT_EQ(b.layout.tp, 8);
  EXPECT_EQ(b.layout.layer_split->first, 20);
  EXPECT_DOUBLE_EQ(*b.layout.offload->optimizer_fraction, 1.0);
  EXPECT_EQ(b.layout.recompute, (Recompute{"full", "uniform", 1}));
  EXPECT_EQ(b.result->mfu_note, "13.0");
  EXPECT_DOUBLE_EQ(*b.result->mfu, 1e-5);
  EXPECT_EQ(b.env.back().second, "true");
  EXPECT_FALSE(b.correctness);
  const std::string text = recipe_to_yaml(b);
  EXPECT_NE(text.find("optimizer_fraction: 1.0\n"), std::string::npos);
  EXPECT_NE(text.find("mfu: 1.0e-05\n"), std::string::npos);
  EXPECT_NE(text.find("mfu_note: '13.0'"), std::string::npos);
  EXPECT_NE(text.find("NEW_VAR: 'true'"), std::string::npos);
  EXPECT_NE(text.find("correctness: null"), std::string::npos);
}

TEST(Recipe, AwkwardStringsRoundTrip) {
  Recipe a = read_recipe(test::seed_path());
  std::string long_text;
  for (int i = 0; i < 12; ++i)
    long_text += "it's a 'quoted' \"word\" - with: colons #hash \\back\\slash  two  spaces [x] {y} ";
  const std::vector<std::string> values = {long_text, long_text + "\ttab", "- starts with a dash", "key: value",
                                           "# not a comment", "trailing space ", " leading space", "yes", "~", "",
                                           "12", "1e5", "0x1F", ".inf", "2026-10-21", "multi\nline\n",
                                           "no final newline\nhere", "\n\nstarts with newlines\n",
                                           "ends with two newlines\n\n", "unicode: \xc3\xa9t\xc3\xa9 \xe2\x80\x94 dash"};
  for (const std::string& v : values) {
    a.layout.summary = v;
    a.notes = v;
    a.env.back().second = v;
    Recipe b = parse_recipe(recipe_to_yaml(a), "awkward.yaml");
    EXPECT_EQ(b.layout.summary, v);
    EXPECT_EQ(b.notes, v);
    EXPECT_EQ(b.env.back().second, v);
    EXPECT_TRUE(a == b) << v;
  }
  for (const std::string& line : [&] {
         std::vector<std::string> lines;
         a.layout.summary = long_text;
         std::string text = recipe_to_yaml(a), l;
         std::istringstream in(text);
         while (std::getline(in, l)) lines.push_back(l);
         return lines;
       }())
    if (line.find("two  spaces") == std::string::npos) EXPECT_LE(line.size(), 130u) << line;
}

TEST(Recipe, RecomputeAsAScalar) {
  std::string text = read_file(test::seed_path());
  test::replace_once(text, "recompute: null", "recompute: selective");
  Recipe a = parse_recipe(text);
  ASSERT_TRUE(a.layout.recompute);
  EXPECT_EQ(a.layout.recompute->granularity, "selective");
  EXPECT_NE(recipe_to_yaml(a).find("recompute: selective\n"), std::string::npos);
}

TEST(Recipe, FromScratchWritesEverySeedField) {
  Recipe r;
  r.model = "Inkling-Small";
  r.gpu.count = 1;
  r.workload.row_tokens = 128;
  r.workload.global_batch = 4;
  r.workload.precision = "fp32";
  r.run = "quill train --steps 20\n";
  const std::string text = recipe_to_yaml(r);
  for (const char* key : {"schema_version: 1", "model: Inkling-Small", "gpu:", "  memory_gb: null", "author: null",
                          "workload:", "  dataset: null", "layout:", "  tp: 1", "  layer_split: null",
                          "  dispatcher: null", "result: null", "correctness: null", "env: {}", "run: |", "notes: ''"})
    EXPECT_NE(text.find(key), std::string::npos) << key << "\n" << text;
  Recipe back = parse_recipe(text);
  EXPECT_TRUE(static_cast<const RecipeFields&>(r) == static_cast<const RecipeFields&>(back));
}

TEST(Recipe, FillingANewSectionWritesAllItsFields) {
  std::string text = read_file(test::seed_path());
  Recipe r = parse_recipe(text);
  r.result.reset();
  Recipe without = parse_recipe(recipe_to_yaml(r));
  without.result.emplace();
  without.result->mfu = 0.5;
  const std::string out = recipe_to_yaml(without);
  EXPECT_NE(out.find("result:\n  tokens_per_s_per_gpu: null\n"), std::string::npos) << out;
  EXPECT_NE(out.find("  mfu: 0.5\n"), std::string::npos);
}

TEST(Recipe, MalformedYamlNamesTheFileAndLine) {
  try {
    parse_recipe("schema_version: 1\nmodel: [unclosed\n", "bad.yaml");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad.yaml"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("line"), std::string::npos) << e.what();
  }
}

TEST(Recipe, WrongTypeNamesTheField) {
  std::string text = read_file(test::seed_path());
  test::replace_once(text, "  tp: 4\n", "  tp: four\n");
  try {
    parse_recipe(text, "typo.yaml");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("typo.yaml: layout.tp: expected an integer, got 'four'"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(parse_recipe("- a\n- b\n", "list.yaml"), Error);
  EXPECT_THROW(read_recipe("/nonexistent/recipe.yaml"), Error);
}

TEST(Recipe, FormatDoubleKeepsAFloatForYaml11Readers) {
  EXPECT_EQ(format_double(0.7), "0.7");
  EXPECT_EQ(format_double(1.0), "1.0");
  EXPECT_EQ(format_double(20), "20.0");
  EXPECT_EQ(format_double(1e-5), "1.0e-05");
  EXPECT_EQ(format_double(616.67), "616.67");
  EXPECT_EQ(format_double(1.5e20), "1.5e+20");
  EXPECT_EQ(YAML::Load(format_double(0.1 + 0.2)).as<double>(), 0.1 + 0.2);
}

}  // namespace
}  // namespace quill
