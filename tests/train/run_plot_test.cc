// OUT/run.svg from metrics.jsonl records (train/run_plot.h): well-formed SVG with every panel's title,
// the validation loss where records carry it, gaps for missing and non-finite values, one step, a run of
// many steps, and the records read a few lines at a time as a trainer appends them.
#include "train/run_plot.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "util/svg_check.h"

namespace quill {
namespace {

namespace fs = std::filesystem;

const char* const kPanelTitles[] = {">Loss<", ">Learning rate<", ">Gradient norm<", ">Throughput<",
                                     ">Expert load, worst MoE layer<", ">Idle experts, all MoE layers<"};

std::string record(int64_t step, double loss, const std::string& more = "") {
  return fmt::format(R"({{"step":{},"loss":{},"grad_norm":{},"lr":{},"tokens":256,"step_time_s":{},"expert_tokens":[[{},2,0,3],[4,4,4,4]]{}}})",
                     step, loss, 1.0 + 0.1 * static_cast<double>(step), 1e-4 * static_cast<double>(step + 1),
                     0.05 + 0.001 * static_cast<double>(step % 3), 5 + step, more);
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// The number of separate line pieces ("M" commands) of the first path in `svg` drawn in `color`.
size_t pieces_of_path(const std::string& svg, const std::string& color) {
  const size_t at = svg.find("<path fill=\"none\" stroke=\"" + color + "\"");
  if (at == std::string::npos) return 0;
  const size_t d = svg.find(" d=\"", at), end = svg.find('"', d + 4);
  return count(svg.substr(d + 4, end - d - 4), "M");
}

TEST(RunPlot, EveryPanelHasItsTitleAndTheSvgIsWellFormed) {
  RunPlot plot("tiny <run> & more", "dp 2");
  for (int64_t s = 0; s < 30; ++s) plot.add_record(record(s, 6.0 - 0.05 * static_cast<double>(s)));
  const std::string svg = plot.svg();
  EXPECT_EQ(test::svg_problem(svg), "");
  for (const char* title : kPanelTitles) EXPECT_NE(svg.find(title), std::string::npos) << title;
  EXPECT_NE(svg.find("tiny &lt;run&gt; &amp; more"), std::string::npos);  // escaped
  EXPECT_NE(svg.find("30 records, steps 0-29; last loss 4.5500"), std::string::npos);
  EXPECT_NE(svg.find(">nats per token<"), std::string::npos);
  EXPECT_NE(svg.find(">tokens/s (whole job)<"), std::string::npos);
  EXPECT_EQ(svg.find("in metrics.jsonl<"), std::string::npos) << "a panel says its data is missing";
  EXPECT_EQ(svg.find("validation"), std::string::npos) << "no record has valid_loss";
  // Each series one unbroken line.
  EXPECT_EQ(pieces_of_path(svg, "#1f5fa8"), 1u);
  EXPECT_EQ(pieces_of_path(svg, "#2a8a3e"), 1u);
  EXPECT_EQ(plot.points().size(), 30u);
  // The expert load of the first record: layer 0 [5,2,0,3] has max/mean 5/2.5 = 2, one idle expert.
  EXPECT_DOUBLE_EQ(plot.points()[0].expert_max_over_mean, 2.0);
  EXPECT_DOUBLE_EQ(plot.points()[0].idle_experts, 1.0);
  EXPECT_DOUBLE_EQ(plot.points()[0].tokens_per_s, 256 / 0.05);
}

TEST(RunPlot, ValidationLossIsDrawnWhereRecordsCarryIt) {
  RunPlot plot("valid", "");
  for (int64_t s = 0; s < 20; ++s)
    plot.add_record(record(s, 6.0 - 0.05 * static_cast<double>(s),
                           s % 5 == 4 ? fmt::format(R"(,"valid_loss":{})", 6.1 - 0.04 * static_cast<double>(s)) : ""));
  // An evaluation written as a line of its own after its step's record joins that step.
  plot.add_record(R"({"step":19,"valid_loss":5.2})");
  ASSERT_EQ(plot.points().size(), 20u);
  EXPECT_DOUBLE_EQ(plot.points()[19].valid_loss, 5.2);
  EXPECT_DOUBLE_EQ(plot.points()[19].loss, 6.0 - 0.05 * 19);  // kept from the step's own record
  const std::string svg = plot.svg();
  EXPECT_EQ(test::svg_problem(svg), "");
  EXPECT_NE(svg.find(">validation<"), std::string::npos);  // the legend names both
  EXPECT_NE(svg.find(">training<"), std::string::npos);
  // Four evaluations (steps 4, 9, 14, 19), joined into one line with a dot on each.
  EXPECT_EQ(pieces_of_path(svg, "#e8710a"), 1u);
  EXPECT_EQ(count(svg, R"(r="3.5" fill="#e8710a")"), 4u + 1u);  // and one in the legend
}

TEST(RunPlot, MissingKeysLeaveTheirPanelsSayingSo) {
  RunPlot plot("sparse", "");
  for (int64_t s = 0; s < 5; ++s) plot.add_record(fmt::format(R"({{"step":{},"loss":{}}})", s, 3.0 - 0.1 * static_cast<double>(s)));
  plot.add_record("not json at all");              // skipped
  plot.add_record(R"({"loss":1.0})");              // no step: skipped
  plot.add_record(R"({"step":"7","loss":1.0})");   // not an integer step: skipped
  plot.add_record(R"({"step":5,"loss":2.4,"expert_tokens":"many"})");  // not the trainer's counts
  ASSERT_EQ(plot.points().size(), 6u);
  const std::string svg = plot.svg();
  EXPECT_EQ(test::svg_problem(svg), "");
  for (const char* title : kPanelTitles) EXPECT_NE(svg.find(title), std::string::npos) << title;
  EXPECT_NE(svg.find(">no lr in metrics.jsonl<"), std::string::npos);
  EXPECT_NE(svg.find(">no grad_norm in metrics.jsonl<"), std::string::npos);
  EXPECT_NE(svg.find(">no tokens and step_time_s in metrics.jsonl<"), std::string::npos);
  EXPECT_EQ(count(svg, ">no expert_tokens in metrics.jsonl<"), 2u);
  EXPECT_EQ(svg.find(">no loss in metrics.jsonl<"), std::string::npos);

  RunPlot empty("nothing yet", "");
  const std::string blank = empty.svg();
  EXPECT_EQ(test::svg_problem(blank), "");
  EXPECT_NE(blank.find("no records in metrics.jsonl yet"), std::string::npos);
}

TEST(RunPlot, OneStepIsADotOnAnAxisAroundIt) {
  RunPlot plot("one", "");
  plot.add_record(record(0, 7.25));
  const std::string svg = plot.svg();
  EXPECT_EQ(test::svg_problem(svg), "");
  EXPECT_NE(svg.find("1 record, step 0; last loss 7.2500"), std::string::npos);
  // A lone value is a dot (a one-point line shows nothing).
  EXPECT_NE(svg.find(R"(r="2.5" fill="#1f5fa8")"), std::string::npos);
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  EXPECT_EQ(svg.find("inf"), std::string::npos);
}

TEST(RunPlot, NonFiniteAndMissingLossesAreGapsInTheLine) {
  RunPlot plot("gaps", "");
  for (int64_t s = 0; s < 12; ++s) {
    std::string line = record(s, 5.0 - 0.1 * static_cast<double>(s));
    const size_t at = line.find("\"loss\":"), end = line.find(',', at);
    if (s == 4) line.replace(at, end - at, "\"loss\":null");  // nlohmann writes a NaN as null
    if (s == 8) line.erase(at, end - at + 1);                   // no loss at all
    plot.add_record(line);
  }
  ASSERT_EQ(plot.points().size(), 12u);
  EXPECT_TRUE(std::isnan(plot.points()[4].loss));
  EXPECT_TRUE(std::isnan(plot.points()[8].loss));
  const std::string svg = plot.svg();
  EXPECT_EQ(test::svg_problem(svg), "");
  EXPECT_EQ(pieces_of_path(svg, "#1f5fa8"), 3u);  // steps 0-3, 5-7, 9-11
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  EXPECT_EQ(svg.find("inf"), std::string::npos);
  // The other panels' lines are whole.
  EXPECT_EQ(pieces_of_path(svg, "#2a8a3e"), 1u);
}

TEST(RunPlot, ALongRunIsThinnedButKeepsItsSpikes) {
  RunPlot plot("long", "");
  for (int64_t s = 0; s < 50000; ++s)
    plot.add_record(fmt::format(R"({{"step":{},"loss":{},"lr":1e-5}})", s, s == 31234 ? 100.0 : 2.0));
  const std::string svg = plot.svg();
  EXPECT_EQ(test::svg_problem(svg), "");
  EXPECT_LT(svg.size(), 400000u);
  EXPECT_NE(svg.find(">100<"), std::string::npos) << "the spike's height is on the loss axis";
  EXPECT_NE(svg.find(">50k<"), std::string::npos) << "the step axis reaches the last step";
}

TEST(RunPlot, ReadsOnlyTheWholeLinesAppendedSinceItsLastRead) {
  const std::string path = (fs::temp_directory_path() / ("quill-run-plot-" + std::to_string(::getpid()) + ".jsonl")).string();
  RunPlot plot("tail", "");
  plot.read_new_records(path);  // absent: nothing
  EXPECT_TRUE(plot.points().empty());
  {
    std::ofstream out(path);
    out << record(0, 5.0) << "\n" << record(1, 4.9) << "\n";
  }
  plot.read_new_records(path);
  EXPECT_EQ(plot.points().size(), 2u);
  const std::string third = record(2, 4.8);
  {
    std::ofstream out(path, std::ios::app);
    out << third.substr(0, 20);  // a line being written
  }
  plot.read_new_records(path);
  EXPECT_EQ(plot.points().size(), 2u);
  {
    std::ofstream out(path, std::ios::app);
    out << third.substr(20) << "\n" << record(3, 4.7) << "\n";
  }
  plot.read_new_records(path);
  ASSERT_EQ(plot.points().size(), 4u);
  EXPECT_EQ(plot.points()[2].step, 2);
  EXPECT_DOUBLE_EQ(plot.points()[3].loss, 4.7);
  fs::remove(path);
}

TEST(RunPlot, AReferenceAndTheMeasuredWindowOfQuillRun) {
  RunPlot plot("run", "");
  std::vector<double> reference;
  for (int64_t s = 0; s < 14; ++s) {
    plot.add_record(record(s, 5.8 - 0.01 * static_cast<double>(s)));
    reference.push_back(5.8 - 0.011 * static_cast<double>(s));
  }
  plot.set_reference_loss(reference);
  plot.set_window(5, 13);
  const std::string svg = plot.svg();
  EXPECT_EQ(test::svg_problem(svg), "");
  EXPECT_NE(svg.find(">reference<"), std::string::npos);
  EXPECT_NE(svg.find(R"(stroke="#7b3fa0" stroke-width="2.5" stroke-dasharray="8 5")"), std::string::npos);
  EXPECT_NE(svg.find(">measured window 5-13<"), std::string::npos);
  EXPECT_NE(svg.find(">5.70<"), std::string::npos);  // round loss ticks
}

TEST(SvgCheck, FindsWhatIsNotWellFormed) {
  EXPECT_EQ(test::svg_problem(R"(<svg a="1"><g><text>x &amp; y</text></g><line/></svg>)"), "");
  EXPECT_NE(test::svg_problem("<svg><g></svg>"), "");
  EXPECT_NE(test::svg_problem("<svg><text>a < b</text></svg>"), "");
  EXPECT_NE(test::svg_problem("<svg><text>a & b</text></svg>"), "");
  EXPECT_NE(test::svg_problem(R"(<svg a=1></svg>)"), "");
  EXPECT_NE(test::svg_problem("<svg></svg><svg></svg>"), "");
  EXPECT_NE(test::svg_problem("<svg>"), "");
}

}  // namespace
}  // namespace quill
