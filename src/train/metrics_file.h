// OUT/metrics.jsonl, one JSON line per step: written with every write and flush checked (a full
// disk stops the run naming the file, instead of training on with metrics cut off mid-line), and,
// when a run resumes, read back up to the checkpoint's step.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/append_file.h"

namespace quill {

struct KeptMetrics {
  std::string text;                   // the lines of steps before first_step, each with its newline
  std::vector<std::string> warnings;  // a torn last line that was dropped
};

// The lines of `path` (absent: none) to keep when a run resumes at `first_step`. A torn last line
// (the earlier run was killed, or its disk filled, mid-write) that lies past the checkpoint's step is
// dropped with a warning; any other line that is not a JSON object with an integer "step" is an error
// naming the file and the line.
KeptMetrics metrics_before_step(const std::string& path, int64_t first_step);

class MetricsFile {
 public:
  // Opens path for appending (created when absent). A resumed run first replaces the file with
  // the lines it keeps (write_file_atomic), then appends.
  explicit MetricsFile(const std::string& path) : file_(path, "metrics") {}

  // Appends one line and flushes it to the kernel; a failed write or flush throws naming the file.
  void append(const std::string& line) { file_.write(line + "\n"); }
  // Closes, checking that the last bytes reached the file.
  void close() { file_.close(); }
  const std::string& path() const { return file_.path(); }

 private:
  AppendFile file_;
};

}  // namespace quill
