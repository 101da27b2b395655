// The trainer's OUT/run.svg: written by the lead at each checkpoint (so that a killed run keeps the
// picture of its last checkpoint) and at the end, from the run's metrics.jsonl.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>

#include "data/synthetic.h"
#include "train/trainer.h"
#include "util/svg_check.h"

namespace quill {
namespace {

namespace fs = std::filesystem;

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Reads OUT/run.svg as each step begins: what a person killing the run then would be left with.
class PictureAtEachStep final : public StepProbe {
 public:
  PictureAtEachStep(const DeviceContext& ctx, std::string svg, std::vector<std::string>* seen)
      : ctx_(ctx), svg_(std::move(svg)), seen_(seen) {}
  DeviceContext context() const override { return ctx_; }
  void begin_step(int64_t, bool) override { seen_->push_back(fs::exists(svg_) ? read_text(svg_) : ""); }
  StepMemory end_step(int64_t, bool, const std::string&) override { return {}; }
  void report(const std::string&, int, bool) override {}

 private:
  DeviceContext ctx_;
  std::string svg_;
  std::vector<std::string>* seen_;
};

TEST(TrainPlot, WrittenAtEachCheckpointAndAtTheEnd) {
  const std::string base = (fs::temp_directory_path() / ("quill-train-plot-" + std::to_string(::getpid()))).string();
  fs::remove_all(base);
  build_synthetic_rows(base + "/rows", 60, 42, 64, 40);
  TrainOptions o;
  o.config_path = std::string(QUILL_SOURCE_DIR) + "/configs/tiny.json";
  o.rows_dir = base + "/rows";
  o.steps = 5;
  o.global_batch = 2;
  o.lr.max_lr = 1e-2;
  o.out_dir = base + "/out";
  o.save_dir = base + "/out/checkpoint";
  o.save_interval = 2;
  o.stop_after = 4;  // then resumed below
  o.quiet = true;
  std::vector<std::string> seen;
  const std::string svg_path = o.out_dir + "/run.svg";
  o.make_probe = [&](const DeviceContext& ctx) { return std::make_unique<PictureAtEachStep>(ctx, svg_path, &seen); };
  run_training(o);

  ASSERT_EQ(seen.size(), 4u);
  EXPECT_EQ(seen[0], "") << "no picture before the first checkpoint";
  EXPECT_EQ(seen[1], "");
  EXPECT_NE(seen[2].find("2 records, steps 0-1"), std::string::npos) << "the checkpoint after step 1 drew steps 0-1";
  EXPECT_NE(seen[3].find("2 records, steps 0-1"), std::string::npos);
  const std::string last = read_text(svg_path);
  EXPECT_EQ(test::svg_problem(last), "");
  EXPECT_NE(last.find("4 records, steps 0-3"), std::string::npos);
  EXPECT_NE(last.find("quill train - tiny.json"), std::string::npos);
  EXPECT_EQ(last.find("in metrics.jsonl<"), std::string::npos) << "every panel has its data (tiny is a MoE model)";
  for (const fs::directory_entry& e : fs::directory_iterator(o.out_dir))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();

  // Resumed: the picture holds the kept steps and the new ones.
  TrainOptions more = o;
  more.stop_after = -1;
  more.resume_dir = o.save_dir;
  more.make_probe = nullptr;
  run_training(more);
  EXPECT_NE(read_text(svg_path).find("5 records, steps 0-4"), std::string::npos);
  fs::remove_all(base);
}

}  // namespace
}  // namespace quill
