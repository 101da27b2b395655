#include "train/metrics_file.h"

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>

#include "base/error.h"
#include "base/file_util.h"

namespace quill {

namespace {

// The step of one metrics line, or nothing when the line is not a JSON object with an integer step.
std::optional<int64_t> step_of(const std::string& line) {
  nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  auto it = j.find("step");
  if (it == j.end() || !it->is_number_integer()) return std::nullopt;
  return it->get<int64_t>();
}

}  // namespace

KeptMetrics metrics_before_step(const std::string& path, int64_t first_step) {
  KeptMetrics kept;
  if (first_step <= 0 || !path_exists(path)) return kept;
  const std::string text = read_file(path);
  size_t begin = 0;
  int64_t line_no = 0, last_step = -1;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    const bool last = end == std::string::npos || text.find_first_not_of(" \t\r\n", end) == std::string::npos;
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(begin, end - begin);
    begin = end + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::optional<int64_t> step = step_of(line);
    if (!step) {
      // A torn last line belongs to the step after the last whole one.
      QUILL_CHECK(last, "{}: line {} is not a metrics line (a JSON object with an integer \"step\"): {:.80}", path,
                  line_no, line);
      QUILL_CHECK(last_step + 1 >= first_step,
                  "{}: line {} is torn, and it holds step {}, which the checkpoint (step {}) has already trained: the "
                  "metrics of the steps before the checkpoint are incomplete",
                  path, line_no, last_step + 1, first_step);
      kept.warnings.push_back(fmt::format("{}: line {} is torn (the earlier run stopped mid-write); dropped, as it lies "
                                          "past the checkpoint's step {}",
                                          path, line_no, first_step));
      break;
    }
    last_step = *step;
    if (*step < first_step) kept.text += line + "\n";
  }
  return kept;
}

}  // namespace quill
