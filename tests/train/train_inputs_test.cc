// What run_training refuses before step 0 (issue 15's reliability defects): bad rows, bad options,
// and a resume with nothing to do. Each check must stop the run before anything is written.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "base/error.h"
#include "base/file_util.h"
#include "data/rows.h"
#include "data/synthetic.h"
#include "train/option_checks.h"
#include "train/trainer.h"

namespace quill {
namespace {

namespace fs = std::filesystem;

std::string temp_dir(const std::string& name) {
  const std::string d =
      (fs::temp_directory_path() / ("quill-inputs-test-" + std::to_string(::getpid()) + "-" + name)).string();
  fs::remove_all(d);
  return d;
}

TrainOptions tiny(const std::string& rows, const std::string& out) {
  TrainOptions o;
  o.config_path = std::string(QUILL_SOURCE_DIR) + "/configs/tiny.json";
  o.rows_dir = rows;
  o.seed = 5;
  o.steps = 2;
  o.global_batch = 2;
  o.lr.max_lr = 1e-2;
  o.out_dir = out;
  o.quiet = true;
  return o;
}

// Rows of 16 tokens, every one `token`, all supervised, `rows` of them.
std::string rows_of(const std::string& name, uint32_t token, int rows) {
  const std::string dir = temp_dir(name);
  RowsWriter w(dir, 16);
  std::vector<uint32_t> t(16, token);
  std::vector<uint8_t> m(16, 1);
  for (int r = 0; r < rows; ++r) w.append(t, m);
  w.finish(nlohmann::json::object());
  return dir;
}

std::string error_of(const TrainOptions& o) {
  try {
    run_training(o);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(TrainInputs, TokenIdsInTheVocabularyPaddingAreRefusedUpFront) {
  // Defect 6: 310 lies between the unpadded (300) and padded (320) vocabulary of the tiny config;
  // it passed the up-front check and failed inside the step naming no row.
  const std::string rows = rows_of("pad-rows", 310, 4), out = temp_dir("pad-out");
  const std::string e = error_of(tiny(rows, out));
  EXPECT_NE(e.find("rows.bin: row 0 position 0 has token id 310"), std::string::npos) << e;
  EXPECT_NE(e.find("vocabulary of 300 (unpadded; its tables are padded to 320) (ids 0 to 299)"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(out));
  EXPECT_EQ(error_of(tiny(rows_of("ok-rows", 299, 4), temp_dir("ok-out"))), "(no error)");
}

TEST(TrainInputs, ZeroRowsIsAClearErrorNotACrash) {
  // Defect 7: the `% total_rows` of choosing a step's rows divided by zero (SIGFPE).
  const std::string rows = rows_of("zero-rows", 5, 0), out = temp_dir("zero-out");
  const std::string e = error_of(tiny(rows, out));
  EXPECT_NE(e.find("holds 0 rows: nothing to train on"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(out));
  EXPECT_THROW(rows_for_step(0, 2, 0), Error);
}

TEST(TrainInputs, CorruptRowsAreRefusedUnlessVerificationIsSkipped) {
  // Defect 10: one flipped bit inside rows.bin trained silently.
  const std::string rows = temp_dir("flip-rows");
  build_synthetic_rows(rows, 40, 7, 64, 8);
  {
    std::fstream f(rows + "/rows.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(64 + 4 * 100);
    char c = 0;
    f.read(&c, 1);
    c ^= 0x01;  // token 100's lowest bit: still a valid id
    f.seekp(64 + 4 * 100);
    f.write(&c, 1);
  }
  TrainOptions o = tiny(rows, temp_dir("flip-out"));
  const std::string e = error_of(o);
  EXPECT_NE(e.find("manifest.json: rows_sha256 is"), std::string::npos) << e;
  EXPECT_NE(e.find("--no-verify-rows"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(o.out_dir));
  o.verify_rows = false;
  EXPECT_EQ(error_of(o), "(no error)");
}

TEST(TrainInputs, MaskByteOutOfRangeIsRefusedEvenWithoutVerification) {
  // Defect 10: a mask byte of 2 trained silently.
  const std::string rows = rows_of("mask-rows", 5, 3);
  {
    std::fstream f(rows + "/rows.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(64 + 4 * 3 * 16 + 16 + 5);  // row 1, mask[5]
    f.put(2);
  }
  TrainOptions o = tiny(rows, temp_dir("mask-out"));
  o.verify_rows = false;
  const std::string e = error_of(o);
  EXPECT_NE(e.find("rows.bin: row 1 mask[5] is 2, expected 0 or 1"), std::string::npos) << e;
}

TEST(TrainInputs, EveryBadOptionIsRefusedBeforeAnythingIsWritten) {
  // Defect 11: these ran with rc 0, or (--lr-decay-style) failed only after OUT/metrics.jsonl existed.
  const std::string rows = rows_of("opt-rows", 5, 4);
  struct Case {
    const char* flag;
    std::function<void(TrainOptions&)> set;
  };
  const std::vector<Case> cases = {
      {"--lr -1", [](TrainOptions& o) { o.lr.max_lr = -1; }},
      {"--beta1 1.5", [](TrainOptions& o) { o.adam.beta1 = 1.5; }},
      {"--beta2 1", [](TrainOptions& o) { o.adam.beta2 = 1; }},
      {"--warmup-fraction 2", [](TrainOptions& o) { o.lr.warmup_fraction = 2; }},
      {"--min-lr 0.1 is above --lr 0.01", [](TrainOptions& o) { o.lr.min_lr = 0.1; }},
      {"--clip-grad -1", [](TrainOptions& o) { o.adam.clip_grad = -1; }},
      {"--weight-decay -0.1", [](TrainOptions& o) { o.adam.weight_decay = -0.1; }},
      {"--adam-eps nan", [](TrainOptions& o) { o.adam.eps = NAN; }},
      {"--save-interval -1", [](TrainOptions& o) { o.save_interval = -1; }},
      {"--save-interval 2 needs --save", [](TrainOptions& o) { o.save_interval = 2; }},
      {"--lr-decay-style 'bogus'", [](TrainOptions& o) { o.lr.style = "bogus"; }},
      {"--stop-after -2", [](TrainOptions& o) { o.stop_after = -2; }},
      {"--distributed-timeout-minutes 0", [](TrainOptions& o) { o.distributed_timeout_minutes = 0; }},
      {"--freeze 'model.llm.no_such_*' matches no parameter", [](TrainOptions& o) { o.freeze_patterns = {"model.llm.no_such_*"}; }},
  };
  for (const Case& c : cases) {
    TrainOptions o = tiny(rows, temp_dir("opt-out"));
    c.set(o);
    const std::string e = error_of(o);
    EXPECT_NE(e.find(c.flag), std::string::npos) << c.flag << ": " << e;
    EXPECT_FALSE(fs::exists(o.out_dir)) << c.flag;
  }
}

TEST(TrainInputs, AResumeWithNothingToDoChangesNothing) {
  // Defect 14: --steps at or below the checkpoint's step (or --stop-after 0) was silent and
  // rewrote summary.json.
  const std::string rows = rows_of("done-rows", 5, 4), out = temp_dir("done-out");
  TrainOptions o = tiny(rows, out);
  o.save_dir = out + "/checkpoint";
  ASSERT_EQ(run_training(o).steps.size(), 2u);
  const std::string summary = read_file(out + "/summary.json"), metrics = read_file(out + "/metrics.jsonl");
  const auto stamp = fs::last_write_time(out + "/summary.json");
  for (int64_t steps : {1, 2}) {
    TrainOptions again = o;
    again.resume_dir = o.save_dir;
    again.steps = steps;
    testing::internal::CaptureStderr();
    const TrainResult r = run_training(again);
    const std::string said = testing::internal::GetCapturedStderr();
    EXPECT_TRUE(r.steps.empty());
    EXPECT_NE(said.find("nothing to do: " + o.save_dir + " is at step 2 and --steps is " + std::to_string(steps)),
              std::string::npos)
        << said;
  }
  TrainOptions zero = o;
  zero.resume_dir = o.save_dir;
  zero.stop_after = 0;
  testing::internal::CaptureStderr();
  EXPECT_TRUE(run_training(zero).steps.empty());
  EXPECT_NE(testing::internal::GetCapturedStderr().find("nothing to do: --stop-after 0"), std::string::npos);
  EXPECT_EQ(read_file(out + "/summary.json"), summary);
  EXPECT_EQ(read_file(out + "/metrics.jsonl"), metrics);
  EXPECT_EQ(fs::last_write_time(out + "/summary.json"), stamp);
}

TEST(TrainInputs, NonEmptyOutIsRefusedUnlessResumingOrOverwriting) {
  // Defect 2: a fresh run into an existing run directory replaced its metrics and checkpoint and
  // left the old hf/ beside the new metrics.
  const std::string rows = rows_of("out-rows", 5, 4), out = temp_dir("out-out");
  TrainOptions o = tiny(rows, out);
  o.steps = 3;
  o.save_dir = out + "/checkpoint";
  o.save_hf = true;
  run_training(o);
  const std::string metrics = read_file(out + "/metrics.jsonl");
  TrainOptions fresh = tiny(rows, out);
  const std::string e = error_of(fresh);
  EXPECT_NE(e.find("--out " + out + ": holds an earlier run"), std::string::npos) << e;
  EXPECT_NE(e.find("--overwrite"), std::string::npos) << e;
  EXPECT_EQ(read_file(out + "/metrics.jsonl"), metrics);
  EXPECT_TRUE(fs::exists(out + "/checkpoint/iter_0000003/state.json"));

  TrainOptions resumed = o;
  resumed.steps = 4;
  resumed.resume_dir = o.save_dir;
  EXPECT_EQ(run_training(resumed).steps.size(), 1u);

  fresh.overwrite = true;
  EXPECT_EQ(run_training(fresh).steps.size(), 2u);
  EXPECT_FALSE(fs::exists(out + "/hf"));          // the earlier run's export is gone
  EXPECT_FALSE(fs::exists(out + "/checkpoint"));  // and its checkpoint
}

TEST(TrainInputs, AFailedStartLeavesNoFilesAndLeftoversOfKilledRunsAreRemoved) {
  // Defect 12: a failed run left OUT/metrics.jsonl; a killed run's checkpoint.tmp-PID stayed for good.
  // Step 0's rows (0 and 1) supervise nothing: the run fails inside step 0, after OUT/metrics.jsonl was made.
  const std::string rows = temp_dir("fail-rows"), out = temp_dir("fail-out");
  {
    RowsWriter w(rows, 16);
    const std::vector<uint32_t> t(16, 5);
    for (int r = 0; r < 4; ++r) w.append(t, std::vector<uint8_t>(16, r < 2 ? 0 : 1));
    w.finish(nlohmann::json::object());
  }
  const std::string e = error_of(tiny(rows, out));
  EXPECT_NE(e.find("step 0: the global batch has no supervised target"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(out));

  TrainOptions good = tiny(rows_of("fail-good-rows", 5, 4), out);
  good.save_dir = out + "/checkpoint";
  run_training(good);
  const std::string leak = out + "/checkpoint.tmp-4194305";  // a pid that runs no process
  make_dirs(leak);
  write_file_atomic(leak + "/weights.safetensors", "partial");
  TrainOptions resumed = good;
  resumed.steps = 3;
  resumed.resume_dir = good.save_dir;
  testing::internal::CaptureStderr();
  run_training(resumed);
  const std::string said = testing::internal::GetCapturedStderr();
  EXPECT_FALSE(fs::exists(leak));
  EXPECT_NE(said.find(leak + ": removed, left by a run that no longer runs"), std::string::npos) << said;
}

}  // namespace
}  // namespace quill
