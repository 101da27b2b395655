// OUT/run.svg: a run's picture for a person, drawn from its metrics.jsonl records (the one plot of quill:
// `quill train` writes it at the end and with each checkpoint, `quill run` adds the reference's loss and
// the measured window). Small multiples in one self-contained SVG (no plotting library; any browser
// shows it): loss (with the validation loss where records carry "valid_loss", and a reference),
// learning rate, gradient norm, tokens/s, and the expert load (the worst MoE layer's max/mean tokens
// per expert, and the experts that received no token). Each panel has a title, round ticks and a
// labelled axis; a value a record lacks (or holds as null, NaN or inf) is a gap in its line, and a
// panel whose records carry none says so.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace quill {

// What the picture reads of one metrics.jsonl record; NaN where the record has no finite value.
struct PlotPoint {
  int64_t step = 0;
  double loss = NAN, valid_loss = NAN, lr = NAN, grad_norm = NAN, tokens_per_s = NAN;
  double expert_max_over_mean = NAN;  // the worst MoE layer's busiest expert over the layer's mean
  double idle_experts = NAN;          // (layer, expert) pairs that received no token in the step
};

class RunPlot {
 public:
  RunPlot(std::string title, std::string subtitle) : title_(std::move(title)), subtitle_(std::move(subtitle)) {}

  // One metrics.jsonl line. A line that is not a JSON object with an integer "step" (a torn last line)
  // is skipped; a record of the same step as the one before it (an evaluation written on its own line)
  // adds its values to that step's.
  void add_record(const std::string& line);
  // The whole lines appended to `metrics_path` since the last call (from its start on the first): the
  // run's trainer calls this before each picture, so that the picture costs a read of the new lines
  // only, and every line written there (by whichever part of the run) is in it. An absent file: none.
  void read_new_records(const std::string& metrics_path);

  // `quill run`: the reference's loss (one per step from step 0) and the measured window, shaded.
  void set_reference_loss(std::vector<double> loss) { reference_loss_ = std::move(loss); }
  void set_window(int64_t begin, int64_t end) { window_begin_ = begin, window_end_ = end; }

  const std::vector<PlotPoint>& points() const { return points_; }
  std::string svg() const;
  // Writes svg() to `path` (a temporary name, then renamed).
  void write(const std::string& path) const;

 private:
  std::string title_, subtitle_;
  std::vector<PlotPoint> points_;
  std::vector<double> reference_loss_;
  int64_t window_begin_ = -1, window_end_ = -1;
  uint64_t read_offset_ = 0;  // read_new_records: bytes of the file already read
};

}  // namespace quill
