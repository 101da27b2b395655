// Helpers for the Parquet tests: the pyarrow fixtures (tests/data/fixtures/parquet, README.md
// there) and their JSONL twin.
#pragma once

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/file_util.h"

namespace quill::test {

inline std::string parquet_fixture(const std::string& name) {
  return std::string(QUILL_SOURCE_DIR) + "/tests/data/fixtures/parquet/" + name;
}

// The four single-file fixtures pyarrow wrote (each holds all 153 conversations).
inline const std::vector<std::string>& parquet_fixture_files() {
  static const std::vector<std::string> files = {"none-v1.parquet", "snappy-v1.parquet", "zstd-v2.parquet",
                                                 "plain-snappy-v2.parquet"};
  return files;
}

// conversations.jsonl, one parsed object per line.
inline std::vector<nlohmann::json> parquet_fixture_jsonl() {
  std::vector<nlohmann::json> out;
  std::ifstream f(parquet_fixture("conversations.jsonl"));
  for (std::string line; std::getline(f, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

}  // namespace quill::test
