// Sizes of the tokenizer's per-thread caches (bpe.cc), chosen at run time so that one benchmark
// run on a many-core host can sweep them: each thread holds its own copy, so a size that is best
// for one thread can overflow the shared L2/L3 with 16 (v5's defaults total ~3.9 MiB a thread).
//
//   QUILL_BPE_FRONT_ENTRIES  front cache: pieces of 2-16 bytes, 48 B an entry (default 65,536: 3 MiB)
//   QUILL_BPE_PAIR_SLOTS     pair-lookup cache, 8 B a slot (default 65,536: 512 KiB)
//   QUILL_BPE_PIECE_SLOTS    merged-piece cache, 24 B a slot plus its arenas (default 16,384)
//
// Each must be a power of two in its range (kMin*/kMax* below); anything else is an error that
// names the variable. They are read once per process, when the first tokenizer is loaded. The
// ids never depend on them (the caches only remember results; tests/data check it).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace quill {

struct BpeCacheSizes {
  static constexpr uint32_t kDefaultFrontEntries = 1u << 16;
  static constexpr uint32_t kDefaultPairSlots = 1u << 16;
  static constexpr uint32_t kDefaultPieceSlots = 1u << 14;
  // A one-entry front or pair cache is as good as none; the piece cache needs a few free slots.
  static constexpr uint32_t kMinFrontEntries = 1, kMaxFrontEntries = 1u << 22;
  static constexpr uint32_t kMinPairSlots = 1, kMaxPairSlots = 1u << 24;
  static constexpr uint32_t kMinPieceSlots = 16, kMaxPieceSlots = 1u << 20;

  uint32_t front_entries = kDefaultFrontEntries;
  uint32_t pair_slots = kDefaultPairSlots;
  uint32_t piece_slots = kDefaultPieceSlots;

  // Throws an error naming `what` and the field when a size is not a power of two in its range.
  void validate(const std::string& what) const;
  // The defaults overridden by the QUILL_BPE_* variables; read and validated on the first call.
  static const BpeCacheSizes& from_env();
  // The same from any variable lookup (getenv for from_env; a map in tests). A value must be a
  // plain decimal power of two; unset or empty keeps the default.
  static BpeCacheSizes from_variables(const std::function<const char*(const char*)>& lookup);
  bool operator==(const BpeCacheSizes&) const = default;
};

}  // namespace quill
