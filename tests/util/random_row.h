// A random training row for the whole-model tests: token ids uniform below `vocab` (seeded), and a
// loss mask chosen by the test (`supervised(t)`: whether position t has a target).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "base/rng.h"

namespace quill::test {

struct Row {
  std::vector<int32_t> tokens;
  std::vector<uint8_t> mask;
};

inline Row random_row(int64_t T, int64_t vocab, uint64_t seed, const std::function<bool(int64_t)>& supervised) {
  Row r;
  SplitMix64 rng(seed);
  for (int64_t t = 0; t < T; ++t) {
    r.tokens.push_back(static_cast<int32_t>(rng.below(static_cast<uint64_t>(vocab))));
    r.mask.push_back(supervised(t) ? 1 : 0);
  }
  return r;
}

}  // namespace quill::test
