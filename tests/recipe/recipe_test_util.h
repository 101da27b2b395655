// Helpers of the recipe tests: the seed fixture (tests/fixtures/recipes/seed.yaml, ATTUNE's recipe unchanged), temporary paths, text edits.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

namespace quill::test {

inline std::string seed_path() { return std::string(QUILL_FIXTURES) + "/recipes/seed.yaml"; }

inline std::string temp_path(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("quill-recipe-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

// Replaces the one occurrence of `from` (a test error when it is not there exactly once).
inline void replace_once(std::string& text, const std::string& from, const std::string& to) {
  size_t at = text.find(from);
  ASSERT_NE(at, std::string::npos) << "not found: " << from;
  ASSERT_EQ(text.find(from, at + 1), std::string::npos) << "found twice: " << from;
  text.replace(at, from.size(), to);
}

}  // namespace quill::test
