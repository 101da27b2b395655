// Where the tokenizer tests find tiktoken's o200k_base ranks (scripts/fetch-o200k.sh writes
// them to ${QUILL_BUILD:-build}/o200k_base.tiktoken): $QUILL_O200K_RANKS, the build directory the
// test runs in (ctest runs tests in <build>/tests), or <source>/build.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

namespace quill::test {

inline std::string find_o200k_ranks() {
  namespace fs = std::filesystem;
  if (const char* env = std::getenv("QUILL_O200K_RANKS"); env && fs::exists(env)) return env;
  for (fs::path p : {fs::current_path() / ".." / "o200k_base.tiktoken", fs::current_path() / "o200k_base.tiktoken",
                     fs::path(QUILL_SOURCE_DIR) / "build" / "o200k_base.tiktoken"}) {
    if (fs::exists(p)) return p.lexically_normal().string();
  }
  return {};
}

inline constexpr const char* kNoO200kRanks =
    "tiktoken's o200k_base ranks were not found: run scripts/fetch-o200k.sh (it needs npm) or set "
    "QUILL_O200K_RANKS to an o200k_base.tiktoken file";

inline std::string tokenizer_fixture(const std::string& name) {
  return std::string(QUILL_SOURCE_DIR) + "/tests/data/fixtures/tokenizer/" + name;
}

}  // namespace quill::test
