// Activation recompute (--recompute-granularity full, and selective with --recompute-modules moe_act
// layernorm; model/recompute.h) changes no bit:
// every step's loss, gradient norm and expert counts, and the fp32 weights after 3 steps, equal the same
// run without it, at one rank and under PP2, TP2 with SP, and EP2 x DP2 (the recomputed forward repeats
// the layers' collectives: the tensor-parallel gathers and halos, the expert exchange), with both of
// Megatron's methods and groups of several layers. Flags it cannot take are refused naming the flag.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "util/command.h"
#include "util/run_dir.h"

namespace {

using quill::test::read_metrics;

const std::string kQuill = QUILL_BINARY, kSrc = QUILL_SOURCE_DIR;

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

void expect_runs(const std::string& cmd) {
  const quill::test::CommandResult r = quill::test::run_command(cmd);
  ASSERT_EQ(r.status, 0) << cmd << "\n" << r.output;
}

const std::string kSelective = "--recompute-granularity selective --recompute-modules moe_act layernorm";

struct Case {
  std::string config, layout, recompute;
  int ranks;
};

TEST(Recompute, ChangesNoBitAtOneRankAndUnderEveryLayout) {
  const std::string rows = quill::test::fresh_temp_dir("recompute", "rows");
  expect_runs(kQuill + " data synth --conversations 300 --row-tokens 32 --max-rows 64 --out " + rows);
  const std::string tiny = kSrc + "/configs/tiny.json", tiny6 = kSrc + "/tests/fixtures/configs/tiny6.json",
                    tp4 = kSrc + "/tests/fixtures/configs/tiny-tp4.json";
  const std::string uniform1 = "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1";
  const std::vector<Case> cases = {
      {tiny, "", uniform1, 1},
      {tiny, "", "--recompute-granularity full --recompute-method uniform --recompute-num-layers 3", 1},
      {tiny6, "--pp 2 --pp-layers 2,4", "--recompute-granularity full --recompute-method uniform --recompute-num-layers 3", 2},
      {tiny6, "--pp 2 --pp-layers 3,3", "--recompute-granularity full --recompute-method block --recompute-num-layers 2", 2},
      {tp4, "--tp 2 --sp", uniform1, 2},
      {tp4, "--dp 2 --ep 2", "--recompute-granularity full --recompute-method block --recompute-num-layers 3", 2},
      // Selective: the experts' SwiGLU outputs and the norms' outputs (with the inputs gathered from them) made
      // again in each layer's backward; under TP with and without SP (the gathers again), the ring gathers of
      // --tp-comm-overlap, EP (the restored inputs of the exchange's block) and PP.
      {tiny, "", kSelective, 1},
      {tp4, "--tp 2 --sp --tp-comm-overlap --moe-shared-expert-overlap", kSelective, 2},
      {tp4, "--tp 2", "--recompute-granularity selective --recompute-modules layernorm", 2},
      {tp4, "--dp 2 --ep 2 --delay-wgrad-compute", kSelective, 2},
      {tiny6, "--pp 2 --pp-layers 2,4", "--recompute-granularity selective --recompute-modules moe_act", 2},
  };
  int index = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.config + " " + c.layout + " " + c.recompute);
    const std::string launcher = c.ranks > 1 ? quill::test::mpirun_command(c.ranks) : std::string();
    const std::string train = launcher + kQuill + " train --config " + c.config + " --rows " + rows +
                              " --seed 4 --steps 3 --global-batch 4 --lr 1e-2 --quiet " + c.layout;
    const std::string plain = quill::test::fresh_temp_dir("recompute", "off" + std::to_string(index));
    const std::string recomputed = quill::test::fresh_temp_dir("recompute", "on" + std::to_string(index++));
    expect_runs(train + " --out " + plain + " --save " + plain + "/checkpoint");
    expect_runs(train + " " + c.recompute + " --out " + recomputed + " --save " + recomputed + "/checkpoint");
    quill::test::expect_runs_bit_identical(plain, recomputed, 3);
    // It did recompute: the summary says so, and the activations kept between the passes shrank.
    const nlohmann::json a = read_json(plain + "/summary.json"), b = read_json(recomputed + "/summary.json");
    EXPECT_EQ(a["recompute"], "none");
    const bool selective = c.recompute.find("selective") != std::string::npos;
    EXPECT_EQ(b["recompute"].get<std::string>().rfind(selective ? "selective " : "full ", 0), 0u) << b["recompute"];
    if (c.recompute == uniform1 || selective)
      EXPECT_LT(b["peak_device_bytes_per_rank"][0].get<int64_t>(), a["peak_device_bytes_per_rank"][0].get<int64_t>());
  }
}

TEST(Recompute, FlagsItCannotTakeAreNamed) {
  const std::string rows = quill::test::fresh_temp_dir("recompute", "rows-bad");
  expect_runs(kQuill + " data synth --conversations 100 --row-tokens 32 --max-rows 8 --out " + rows);
  const std::string train = kQuill + " train --config " + kSrc + "/configs/tiny.json --rows " + rows + " --steps 1 --global-batch 1 --quiet --out " +
                            quill::test::fresh_temp_dir("recompute", "bad");
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"--recompute-granularity selective", "--recompute-granularity selective recomputes Megatron's default module "
                                            "core_attn, which quill has no use for"},
      {"--recompute-granularity selective --recompute-modules core_attn", "--recompute-modules core_attn: quill's "
                                                                           "attention keeps no [T, T] tensor"},
      {"--recompute-granularity selective --recompute-modules moe_act mlp", "--recompute-modules mlp: not built in quill"},
      {"--recompute-modules moe_act", "--recompute-modules moe_act needs --recompute-granularity selective"},
      {"--recompute-granularity selective --recompute-modules moe_act --recompute-method block",
       "--recompute-method block needs --recompute-granularity full (selective keeps every layer)"},
      {"--recompute-granularity partial", "--recompute-granularity: 'partial' is not full or selective"},
      {"--recompute-granularity full --recompute-method every", "--recompute-method: 'every' is not uniform or block"},
      {"--recompute-granularity full --recompute-num-layers 0", "--recompute-num-layers 0: give 1 or more layers"},
      {"--recompute-method block", "--recompute-method block needs --recompute-granularity full"},
  };
  for (const auto& [flags, needle] : bad) {
    const quill::test::CommandResult r = quill::test::run_command(train + " " + flags);
    EXPECT_NE(r.status, 0) << flags;
    EXPECT_NE(r.output.find(needle), std::string::npos) << flags << ":\n" << r.output;
  }
}

}  // namespace
