#include "data/bpe_cache_sizes.h"

#include <bit>
#include <cstdlib>
#include <string_view>

#include "base/error.h"

namespace quill {

namespace {

void check_size(uint32_t value, uint32_t lo, uint32_t hi, std::string_view name, const std::string& what) {
  QUILL_CHECK(std::has_single_bit(value) && value >= lo && value <= hi,
              "{}: {} is {}; it must be a power of two from {} to {}", what, name, value, lo, hi);
}

// The variable as a size, or `fallback` when unset; a value that is not a plain decimal number is
// an error (a typo must not silently leave the default in place during a sweep).
uint32_t env_size(const std::function<const char*(const char*)>& lookup, const char* name, uint32_t fallback) {
  const char* text = lookup(name);
  if (text == nullptr || *text == '\0') return fallback;
  uint64_t v = 0;
  std::string_view s(text);
  QUILL_CHECK(s.size() <= 10 && s.find_first_not_of("0123456789") == std::string_view::npos,
              "{}={}: expected a power of two", name, s);
  for (char c : s) v = v * 10 + static_cast<uint64_t>(c - '0');
  QUILL_CHECK(v <= UINT32_MAX, "{}={}: too large", name, s);
  return static_cast<uint32_t>(v);
}

}  // namespace

void BpeCacheSizes::validate(const std::string& what) const {
  check_size(front_entries, kMinFrontEntries, kMaxFrontEntries, "QUILL_BPE_FRONT_ENTRIES", what);
  check_size(pair_slots, kMinPairSlots, kMaxPairSlots, "QUILL_BPE_PAIR_SLOTS", what);
  check_size(piece_slots, kMinPieceSlots, kMaxPieceSlots, "QUILL_BPE_PIECE_SLOTS", what);
}

BpeCacheSizes BpeCacheSizes::from_variables(const std::function<const char*(const char*)>& lookup) {
  BpeCacheSizes s;
  s.front_entries = env_size(lookup, "QUILL_BPE_FRONT_ENTRIES", kDefaultFrontEntries);
  s.pair_slots = env_size(lookup, "QUILL_BPE_PAIR_SLOTS", kDefaultPairSlots);
  s.piece_slots = env_size(lookup, "QUILL_BPE_PIECE_SLOTS", kDefaultPieceSlots);
  s.validate("the tokenizer cache sizes (environment)");
  return s;
}

const BpeCacheSizes& BpeCacheSizes::from_env() {
  // A function-local static: read once, thread-safe; if the check throws, the next call retries
  // (and throws again), so every tokenizer load reports the bad variable.
  static const BpeCacheSizes sizes = from_variables([](const char* name) { return std::getenv(name); });
  return sizes;
}

}  // namespace quill
