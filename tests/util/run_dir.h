// Helpers of the CLI tests that run quill and read its run directory: fresh temporary directories,
// checked commands, metrics.jsonl lines.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "io/safetensors.h"
#include "train/checkpoint_history.h"
#include "train/train_checkpoint.h"
#include "util/command.h"

namespace quill::test {

// An absent directory under the system's temporary one, unique to this process: "quill-PREFIX-PID-NAME".
inline std::string fresh_temp_dir(const std::string& prefix, const std::string& name) {
  const std::filesystem::path d =
      std::filesystem::temp_directory_path() / ("quill-" + prefix + "-" + std::to_string(::getpid()) + "-" + name);
  std::filesystem::remove_all(d);
  return d.string();
}

// The small synthetic rows most CLI tests train on (`quill data synth`: 300 conversations, 32-token rows, at most
// 64 rows), made once per test binary and `prefix`; a failed synth fails the test.
inline std::string small_rows_once(const std::string& prefix) {
  static std::map<std::string, std::string> made;
  auto [it, fresh] = made.try_emplace(prefix);
  if (fresh) {
    it->second = fresh_temp_dir(prefix, "rows");
    const CommandResult r = run_command(std::string(QUILL_BINARY) +
                                        " data synth --conversations 300 --row-tokens 32 --max-rows 64 --out " + it->second);
    EXPECT_EQ(r.status, 0) << r.output;
  }
  return it->second;
}

// A JSON file (summary.json, collectives.json, ...) parsed; a missing file fails the test, naming it.
inline nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return nlohmann::json::parse(in);
}

// The checkpoint directory a --save DIR's latest_checkpointed_iteration.txt names (DIR/iter_NNNNNNN);
// DIR itself when it has no latest file (a single checkpoint directory, or none yet).
inline std::string latest_checkpoint(const std::string& save) {
  const std::optional<int64_t> latest = latest_iteration(save);
  return latest ? iteration_dir(save, *latest) : save;
}

#ifdef QUILL_MPIEXEC
// The launcher's command line for `ranks` processes (CMake's QUILL_MPIEXEC, with its flags), then a space.
inline std::string mpirun_command(int ranks) { return std::string(QUILL_MPIEXEC) + " -np " + std::to_string(ranks) + " "; }
#endif

// ||a - b|| / ||b|| over the elements of two F32 tensors of one size.
inline double relative_l2_f32(const Tensor& a, const Tensor& b) {
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < b.numel(); ++i) {
    const double x = a.data_as<float>()[i], y = b.data_as<float>()[i];
    diff += (x - y) * (x - y), norm += y * y;
  }
  return std::sqrt(diff / std::max(norm, 1e-30));
}

// Runs cmd; a nonzero status adds a test failure naming the command and its output. Returns the status.
inline int run_checked(const std::string& cmd, std::string* output = nullptr) {
  const CommandResult r = run_command(cmd);
  if (output) *output = r.output;
  if (r.status != 0) ADD_FAILURE() << cmd << "\n" << r.output;
  return r.status;
}

// OUT/metrics.jsonl, one parsed line per step (empty when the file is missing).
inline std::vector<nlohmann::json> read_metrics(const std::string& out) {
  std::vector<nlohmann::json> v;
  std::ifstream in(out + "/metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) v.push_back(nlohmann::json::parse(line));
  return v;
}

inline std::vector<double> read_metric(const std::string& out, const char* key) {
  std::vector<double> v;
  for (const nlohmann::json& j : read_metrics(out)) v.push_back(j.at(key).get<double>());
  return v;
}

// A layout's run against one rank's: every step's loss and gradient norm within `rel` relative, and
// the same per-expert token counts.
inline void expect_steps_match(const std::vector<nlohmann::json>& got, const std::vector<nlohmann::json>& ref,
                               double rel = 1e-5) {
  ASSERT_EQ(got.size(), ref.size());
  for (size_t i = 0; i < got.size(); ++i) {
    for (const char* key : {"loss", "grad_norm"}) {
      const double a = got[i][key].get<double>(), b = ref[i][key].get<double>();
      EXPECT_NEAR(a, b, rel * std::fabs(b)) << key << " step " << i;
    }
    EXPECT_EQ(got[i]["expert_tokens"], ref[i]["expert_tokens"]) << "step " << i;
  }
}

// The fp32 weights of a training checkpoint (read through its global element ranges) within `rel`
// relative L2 of the reference's, tensor by tensor.
inline void expect_weights_match(const std::string& checkpoint, const std::map<std::string, Tensor>& ref,
                                 double rel = 1e-5) {
  const auto values = checkpoint_values(checkpoint);
  ASSERT_EQ(values.size(), ref.size());
  for (const auto& [name, t] : values) EXPECT_LE(relative_l2_f32(t, ref.at(name)), rel) << name;
}

// A performance path (an overlap, recompute) against the same run without it: as many steps, every
// step's loss, gradient norm and expert counts equal, and every fp32 weight of the two runs'
// OUT/checkpoint bit for bit.
inline void expect_runs_bit_identical(const std::string& plain, const std::string& other, size_t steps) {
  const auto a = read_metrics(plain), b = read_metrics(other);
  ASSERT_EQ(a.size(), steps);
  ASSERT_EQ(b.size(), a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i]["loss"].get<double>(), b[i]["loss"].get<double>()) << "step " << i;
    EXPECT_EQ(a[i]["grad_norm"].get<double>(), b[i]["grad_norm"].get<double>()) << "step " << i;
    EXPECT_EQ(a[i]["expert_tokens"], b[i]["expert_tokens"]) << "step " << i;
  }
  std::map<std::string, Tensor> ref;
  for (auto& [name, t] : checkpoint_values(plain + "/checkpoint")) ref[name] = t;
  for (auto& [name, t] : checkpoint_values(other + "/checkpoint")) {
    ASSERT_TRUE(ref.count(name)) << name;
    EXPECT_EQ(std::memcmp(ref[name].data(), t.data(), t.nbytes()), 0) << name << " differs";
  }
}

// Two safetensors files with the same tensor names, each tensor's bytes identical (an export under a
// layout against one rank's).
inline void expect_same_tensor_bytes(const std::string& a_path, const std::string& b_path) {
  const SafetensorsFile a = SafetensorsFile::open(a_path), b = SafetensorsFile::open(b_path);
  ASSERT_EQ(a.names(), b.names());
  for (const std::string& name : a.names()) {
    const Tensor x = a.raw(name), y = b.raw(name);
    ASSERT_EQ(x.nbytes(), y.nbytes()) << name;
    EXPECT_EQ(std::memcmp(x.data(), y.data(), x.nbytes()), 0) << name;
  }
}

// The text of the file at `path` with each (from, to) edit applied once, in order; an edit whose
// `from` is missing adds a test failure naming it.
inline std::string edited_text(const std::string& path, const std::vector<std::pair<std::string, std::string>>& edits) {
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (const auto& [from, to] : edits) {
    const size_t at = text.find(from);
    if (at == std::string::npos) {
      ADD_FAILURE() << path << ": no '" << from << "' to edit";
      continue;
    }
    text.replace(at, from.size(), to);
  }
  return text;
}

}  // namespace quill::test
