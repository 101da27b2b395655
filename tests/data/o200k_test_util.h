// Where the tokenizer tests find tiktoken's o200k_base ranks (scripts/fetch-o200k.sh writes
// them to ${QUILL_BUILD:-build}/o200k_base.tiktoken): $QUILL_O200K_RANKS, the build directory the
// test runs in (ctest runs tests in <build>/tests), or <source>/build.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/file_util.h"

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

struct Golden {
  std::string input_sha256;
  std::vector<uint32_t> ids;
};

// The QTOKIDS1 file of make_golden_ids.py: magic, SHA-256 of the input, u64 count, LEB128 ids.
inline Golden read_golden(const std::string& path) {
  std::string bytes = read_file(path);
  QUILL_CHECK(bytes.size() >= 48 && bytes.compare(0, 8, "QTOKIDS1") == 0, "{}: not a QTOKIDS1 file", path);
  Golden g;
  static const char* hex = "0123456789abcdef";
  for (int i = 8; i < 40; ++i) {
    g.input_sha256 += hex[static_cast<unsigned char>(bytes[i]) >> 4];
    g.input_sha256 += hex[static_cast<unsigned char>(bytes[i]) & 15];
  }
  uint64_t count = 0;
  std::memcpy(&count, bytes.data() + 40, 8);
  size_t pos = 48;
  while (pos < bytes.size()) {
    uint32_t v = 0;
    for (int shift = 0;; shift += 7) {
      QUILL_CHECK(pos < bytes.size() && shift < 35, "{}: truncated varint", path);
      auto b = static_cast<unsigned char>(bytes[pos++]);
      v |= static_cast<uint32_t>(b & 0x7F) << shift;
      if (!(b & 0x80)) break;
    }
    g.ids.push_back(v);
  }
  QUILL_CHECK(g.ids.size() == count, "{}: {} ids, the header says {}", path, g.ids.size(), count);
  return g;
}

}  // namespace quill::test
