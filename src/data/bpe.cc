#include "data/bpe.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <functional>
#include <cstring>
#include <cstdlib>
#include <new>
#include <sys/mman.h>

#include "base/error.h"
#include "data/bpe_hash.h"

namespace quill {

using bpe_detail::load_le;
using bpe_detail::mix;

namespace {

size_t table_size_for(size_t n) { return std::bit_ceil(std::max<size_t>(16, n * 2)); }

// Building the tables takes token ids in chunks of this many per parallel task.
constexpr size_t kBuildChunk = 4096;
// Table lookups while building go in batches of this many, all prefetched before the first.
constexpr size_t kLookupBatch = 32;
size_t chunks_of(size_t n) { return (n + kBuildChunk - 1) / kBuildChunk; }

// v = n copies of `value`, written on all threads (DefaultInitAllocator: resize writes nothing).
template <typename T, typename A>
void parallel_fill(std::vector<T, A>& v, size_t n, const T& value, ThreadPool& pool) {
  v.clear();
  v.resize(n);
  constexpr size_t kPart = size_t{1} << 16;
  pool.parallel_for((n + kPart - 1) / kPart, [&](size_t c) {
    std::fill(v.begin() + c * kPart, v.begin() + std::min(n, (c + 1) * kPart), value);
  });
}

std::atomic<uint64_t> next_instance{1};

}  // namespace

void* huge_page_allocate(size_t bytes) {
  constexpr size_t kHuge = size_t{2} << 20;
  if (bytes < kHuge) return ::operator new(bytes);
  size_t size = (bytes + kHuge - 1) / kHuge * kHuge;
  void* p = std::aligned_alloc(kHuge, size);
  if (p == nullptr) throw std::bad_alloc();
  ::madvise(p, size, MADV_HUGEPAGE);
  return p;
}
void huge_page_free(void* p, size_t bytes) {
  if (bytes < (size_t{2} << 20)) ::operator delete(p);
  else std::free(p);
}

uint64_t hash_bytes(const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xFF51AFD7ED558CCDull);
  while (n >= 8) {
    h = (h ^ load_le(p, 8)) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
    p += 8;
    n -= 8;
  }
  if (n > 0) h = (h ^ load_le(p, n)) * 0x94D049BB133111EBull;
  return mix(h);
}

TokenBytes TokenBytes::from_strings(const std::vector<std::string>& tokens, const std::string& source) {
  TokenBytes out;
  out.offsets.assign(1, 0);
  for (const std::string& t : tokens) {
    QUILL_CHECK(out.blob.size() + t.size() <= 0xFFFFFFFFu, "{}: more than 4 GiB of token bytes", source);
    out.blob += t;
    out.offsets.push_back(static_cast<uint32_t>(out.blob.size()));
  }
  return out;
}

void BpeCore::set_tokens(TokenBytes tokens, const std::string& source, ThreadPool& pool) {
  QUILL_CHECK(tokens.size() > 0 && tokens.size() < kNoId, "{}: {} tokens", source, tokens.size());
  blob_ = std::move(tokens.blob);
  offsets_ = std::move(tokens.offsets);
  build_piece_table(source, pool);
  for (int b = 0; b < 256; ++b) {
    char c = static_cast<char>(b);
    std::optional<uint32_t> id = find_token(std::string_view(&c, 1));
    QUILL_CHECK(id.has_value(), "{}: the byte 0x{:02x} has no token (a byte-level BPE vocabulary has all 256)", source,
                b);
    byte_id_[b] = *id;
  }
}

namespace {

inline uint64_t head_bytes(const char* p, size_t n) {
  return load_le(reinterpret_cast<const uint8_t*>(p), n < 8 ? n : 8);
}

}  // namespace

void BpeCore::build_piece_table(const std::string& source, ThreadPool& pool) {
  const size_t n = id_count();
  parallel_fill(pieces_, table_size_for(n), PieceSlot{0, kNoId, 0}, pool);  // load <= 0.5: a miss ends after ~2 probes
  piece_filter_.assign(kFilterWords, 0);
  piece_mask_ = pieces_.size() - 1;
  // Inserted on all threads: a token claims the first free slot of its probe sequence by a
  // compare-and-swap of the slot's id, then fills in the rest of the slot, which nobody reads
  // before the loop ends. Slots never become free again, so every token is found whatever the
  // order of insertion (the layout varies, the lookups do not).
  pool.parallel_for(chunks_of(n), [&](size_t c) {
    for (size_t id = c * kBuildChunk; id < std::min(n, (c + 1) * kBuildChunk); ++id) {
      std::string_view bytes = token_bytes(static_cast<uint32_t>(id));
      if (bytes.empty()) continue;
      std::atomic_ref<uint8_t> longest(longest_by_first_byte_[static_cast<uint8_t>(bytes[0])]);
      const auto len = static_cast<uint8_t>(std::min<size_t>(255, bytes.size()));
      for (uint8_t v = longest.load(std::memory_order_relaxed);
           len > v && !longest.compare_exchange_weak(v, len, std::memory_order_relaxed);) {
      }
      const uint64_t h = hash_bytes(bytes.data(), bytes.size());
      std::atomic_ref<uint64_t>(piece_filter_[filter_word(h)]).fetch_or(filter_bits(h), std::memory_order_relaxed);
      for (uint64_t i = h & piece_mask_;; i = (i + 1) & piece_mask_) {
        uint32_t free = kNoId;
        if (std::atomic_ref<uint32_t>(pieces_[i].id).compare_exchange_strong(free, static_cast<uint32_t>(id),
                                                                             std::memory_order_relaxed)) {
          pieces_[i].head = head_bytes(bytes.data(), bytes.size());
          pieces_[i].len = static_cast<uint32_t>(bytes.size());
          break;
        }
      }
    }
  });
  // Two tokens with the same bytes: one of them finds the other. Then the table is built again
  // in id order, which names the same pair whatever the thread count.
  // The lookups go in batches whose slots are all prefetched first (the table is 8 MiB, so each
  // is a cache miss; one after the other they were most of the load, perf, 2026-12-01).
  std::atomic<bool> duplicate{false};
  pool.parallel_for(chunks_of(n), [&](size_t c) {
    const size_t lo = c * kBuildChunk, hi = std::min(n, (c + 1) * kBuildChunk);
    uint64_t hashes[kLookupBatch];
    for (size_t b = lo; b < hi; b += kLookupBatch) {
      const size_t e = std::min(hi, b + kLookupBatch);
      for (size_t id = b; id < e; ++id) {
        std::string_view bytes = token_bytes(static_cast<uint32_t>(id));
        hashes[id - b] = hash_bytes(bytes.data(), bytes.size());
        __builtin_prefetch(&pieces_[hashes[id - b] & piece_mask_]);
      }
      for (size_t id = b; id < e; ++id) {
        std::string_view bytes = token_bytes(static_cast<uint32_t>(id));
        if (!bytes.empty() && find_token(bytes, hashes[id - b]) != id) duplicate.store(true, std::memory_order_relaxed);
      }
    }
  });
  if (!duplicate.load()) return;
  pieces_.assign(pieces_.size(), PieceSlot{0, kNoId, 0});
  for (uint32_t id = 0; id < n; ++id) {
    std::string_view bytes = token_bytes(id);
    if (bytes.empty()) continue;
    std::optional<uint32_t> same = find_token(bytes);
    QUILL_CHECK(!same.has_value(), "{}: tokens {} and {} have the same bytes", source, same.value_or(0), id);
    uint64_t i = hash_bytes(bytes.data(), bytes.size()) & piece_mask_;
    while (pieces_[i].id != kNoId) i = (i + 1) & piece_mask_;
    pieces_[i] = {head_bytes(bytes.data(), bytes.size()), id, static_cast<uint32_t>(bytes.size())};
  }
}

std::optional<uint32_t> BpeCore::find_token(std::string_view bytes, uint64_t h) const {
  if (pieces_.empty()) return std::nullopt;
  if ((piece_filter_[filter_word(h)] & filter_bits(h)) != filter_bits(h)) return std::nullopt;
  const uint64_t head = head_bytes(bytes.data(), bytes.size());
  for (uint64_t i = h & piece_mask_;; i = (i + 1) & piece_mask_) {
    const PieceSlot& s = pieces_[i];
    if (s.id == kNoId) return std::nullopt;
    if (s.head == head && s.len == bytes.size() &&
        (s.len <= 8 || std::memcmp(blob_.data() + offsets_[s.id] + 8, bytes.data() + 8, s.len - 8) == 0)) {
      return s.id;
    }
  }
}

void BpeCore::reserve_pairs(size_t n) {
  pairs_.assign(table_size_for(n), PairSlot{kEmptyKey, 0, 0});
  pair_mask_ = pairs_.size() - 1;
  pair_count_ = 0;
}

void BpeCore::add_pair(uint32_t left, uint32_t right, uint32_t rank, uint32_t id) {
  uint64_t key = (static_cast<uint64_t>(left) << 32) | right;
  for (uint64_t i = mix(key * 0x9E3779B97F4A7C15ull) & pair_mask_;; i = (i + 1) & pair_mask_) {
    PairSlot& s = pairs_[i];
    if (s.key == kEmptyKey) {
      s = {key, rank, id};
      ++pair_count_;
      return;
    }
    if (s.key == key) {  // a later duplicate replaces the earlier one (Hugging Face's map does)
      s.rank = rank;
      s.id = id;
      return;
    }
  }
}

void BpeCore::set_cache_sizes(const BpeCacheSizes& sizes) {
  sizes.validate("tokenizer cache sizes");
  cache_sizes_ = sizes;
  instance_ = next_instance++;
}

BpeCore BpeCore::unbuilt() {
  BpeCore core;
  core.instance_ = next_instance++;
  core.cache_sizes_ = BpeCacheSizes::from_env();
  return core;
}

BpeCore BpeCore::from_ranks(TokenBytes tokens, const std::string& source, ThreadPool* pool) {
  ThreadPool one(1);
  ThreadPool& p = pool ? *pool : one;
  BpeCore core = unbuilt();
  core.set_tokens(std::move(tokens), source, p);
  core.whole_piece_lookup_ = true;
  // Every split of every token into two tokens is a merge, ranked by the token's rank. The
  // tokens' bytes are distinct (build_piece_table), so no pair comes from two tokens.
  const size_t n = core.id_count();
  // The splits are looked up in batches whose slots are prefetched first (a batch's misses then
  // overlap: these lookups were half of the load one after the other, perf, 2026-12-01).
  std::vector<std::vector<PairSlot>> found(chunks_of(n));
  p.parallel_for(found.size(), [&](size_t c) {
    struct Split {
      uint64_t left_hash, right_hash;
      uint32_t id, k;
    };
    Split batch[kLookupBatch];
    size_t used = 0;
    auto flush = [&] {
      for (size_t b = 0; b < used; ++b) {
        const Split& s = batch[b];
        std::string_view t = core.token_bytes(s.id);
        std::optional<uint32_t> left = core.find_token(t.substr(0, s.k), s.left_hash);
        if (!left) continue;
        std::optional<uint32_t> right = core.find_token(t.substr(s.k), s.right_hash);
        if (right) found[c].push_back({(static_cast<uint64_t>(*left) << 32) | *right, s.id, s.id});
      }
      used = 0;
    };
    for (size_t id = c * kBuildChunk; id < std::min(n, (c + 1) * kBuildChunk); ++id) {
      std::string_view t = core.token_bytes(static_cast<uint32_t>(id));
      for (size_t k = 1; k < t.size(); ++k) {
        Split& s = batch[used++];
        s = {hash_bytes(t.data(), k), hash_bytes(t.data() + k, t.size() - k), static_cast<uint32_t>(id),
             static_cast<uint32_t>(k)};
        __builtin_prefetch(&core.pieces_[s.left_hash & core.piece_mask_]);
        __builtin_prefetch(&core.pieces_[s.right_hash & core.piece_mask_]);
        if (used == kLookupBatch) flush();
      }
    }
    flush();
  });
  size_t total = 0;
  for (const auto& f : found) total += f.size();
  if (n < (size_t{1} << 20)) {
    // The compact table compact_pairs() would make (ranks are ids here: below 2^20, and the
    // merged id is the rank), built directly and on all threads, as the piece table is.
    parallel_fill(core.pairs8_, table_size_for(total), kEmptyKey, p);
    core.pair_filter_.assign(kFilterWords, 0);
    core.pair_mask_ = core.pairs8_.size() - 1;
    core.pair_count_ = total;
    core.compact_ = true;
    p.parallel_for(found.size(), [&](size_t c) {
      for (const PairSlot& s : found[c]) {
        uint64_t key = ((s.key >> 32) << 20) | (s.key & 0xFFFFFFFFu), value = (key << 24) | s.rank;
        const uint64_t h = mix(key * 0x9E3779B97F4A7C15ull);
        std::atomic_ref<uint64_t>(core.pair_filter_[core.filter_word(h)]).fetch_or(filter_bits(h), std::memory_order_relaxed);
        for (uint64_t i = h & core.pair_mask_;; i = (i + 1) & core.pair_mask_) {
          uint64_t free = kEmptyKey;
          if (std::atomic_ref<uint64_t>(core.pairs8_[i]).compare_exchange_strong(free, value, std::memory_order_relaxed)) {
            break;
          }
        }
      }
      std::vector<PairSlot>().swap(found[c]);
    });
  } else {
    core.reserve_pairs(total);
    for (const auto& f : found) {
      for (const PairSlot& s : f) core.add_pair(static_cast<uint32_t>(s.key >> 32), static_cast<uint32_t>(s.key), s.rank, s.id);
    }
    core.compact_pairs();
  }
  core.build_byte_pairs(p);
  core.char_parts_ = CharParts::build(core, &p);
  return core;
}

BpeCore BpeCore::from_merges(std::vector<std::string> tokens, const std::vector<std::pair<uint32_t, uint32_t>>& merges,
                             bool whole_piece_lookup, const std::string& source, ThreadPool* pool) {
  ThreadPool one(1);
  ThreadPool& p = pool ? *pool : one;
  BpeCore core = unbuilt();
  core.set_tokens(TokenBytes::from_strings(tokens, source), source, p);
  core.whole_piece_lookup_ = whole_piece_lookup;
  core.reserve_pairs(merges.size());
  std::string merged;
  for (size_t r = 0; r < merges.size(); ++r) {
    auto [a, b] = merges[r];
    QUILL_CHECK(a < core.id_count() && b < core.id_count(), "{}: merges[{}] names an id outside the vocabulary", source,
                r);
    merged.assign(core.token_bytes(a));
    merged += core.token_bytes(b);
    std::optional<uint32_t> id = core.find_token(merged);
    QUILL_CHECK(id.has_value(), "{}: merges[{}]: the merged token is not in the vocabulary", source, r);
    core.add_pair(a, b, static_cast<uint32_t>(r), *id);
  }
  core.compact_pairs();
  core.build_byte_pairs(p);
  return core;
}

namespace {

// The per-thread cache of merged pieces: open addressing over (hash, piece) -> ids, with the
// pieces and ids in two arenas; everything is dropped when it is half full. Its slot count is the
// core's (BpeCacheSizes::piece_slots, a power of two); a core of another identity resets it.
class PieceCache {
 public:
  static constexpr size_t kMaxBytes = 256;

  void reset(uint64_t owner, size_t slots) {
    if (owner_ == owner && used_ < slots / 2) return;
    owner_ = owner;
    used_ = 0;
    mask_ = slots - 1;
    slots_.assign(slots, Slot{});
    bytes_.clear();
    ids_.clear();
  }
  bool find(std::string_view piece, uint64_t h, std::vector<uint32_t>& out) const {
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.n_ids == 0) return false;
      if (s.hash == h && s.n_bytes == piece.size() && std::memcmp(bytes_.data() + s.bytes, piece.data(), piece.size()) == 0) {
        out.insert(out.end(), ids_.begin() + s.ids, ids_.begin() + s.ids + s.n_ids);
        return true;
      }
    }
  }
  void insert(std::string_view piece, uint64_t h, const uint32_t* ids, size_t n_ids) {
    if (piece.size() > kMaxBytes || n_ids == 0 || n_ids > 0xFFFF) return;
    size_t i = h & mask_;
    while (slots_[i].n_ids != 0) i = (i + 1) & mask_;
    slots_[i] = {h, static_cast<uint32_t>(bytes_.size()), static_cast<uint32_t>(ids_.size()),
                 static_cast<uint16_t>(piece.size()), static_cast<uint16_t>(n_ids)};
    bytes_.append(piece);
    ids_.insert(ids_.end(), ids, ids + n_ids);
    ++used_;
  }

 private:
  struct Slot {
    uint64_t hash = 0;
    uint32_t bytes = 0, ids = 0;
    uint16_t n_bytes = 0, n_ids = 0;  // n_ids 0: free
  };
  uint64_t owner_ = 0;
  size_t used_ = 0, mask_ = 0;
  std::vector<Slot> slots_;
  std::string bytes_;
  std::vector<uint32_t> ids_;
};

}  // namespace

void BpeCore::compact_pairs() {
  bool fits = id_count() < (1u << 20), identity = true;
  uint32_t max_rank = 0;
  for (const PairSlot& s : pairs_) {
    if (s.key == kEmptyKey) continue;
    fits = fits && s.rank < (1u << 24) - 1;
    identity = identity && s.rank == s.id;
    max_rank = std::max(max_rank, s.rank);
  }
  if (!fits) return;
  std::vector<uint64_t, DefaultInitAllocator<uint64_t>> compact(pairs_.size(), kEmptyKey);
  if (!identity) rank_to_id_.assign(max_rank + 1, kNoId);
  for (const PairSlot& s : pairs_) {
    if (s.key == kEmptyKey) continue;
    uint64_t left = s.key >> 32, right = s.key & 0xFFFFFFFFu, key = (left << 20) | right;
    uint64_t i = mix(key * 0x9E3779B97F4A7C15ull) & pair_mask_;
    while (compact[i] != kEmptyKey) i = (i + 1) & pair_mask_;
    compact[i] = (key << 24) | s.rank;
    if (!identity) rank_to_id_[s.rank] = s.id;
  }
  pairs8_ = std::move(compact);
  pairs_.clear();
  pairs_.shrink_to_fit();
  compact_ = true;
}

void BpeCore::build_byte_pairs(ThreadPool& pool) {
  byte_pairs_.resize(1 << 16);
  pool.parallel_for(256, [&](size_t a) {
    for (int b = 0; b < 256; ++b) byte_pairs_[(a << 8) | b] = lookup_pair(byte_id_[a], byte_id_[b]);
  });
}

namespace {

// The per-thread front cache (v4; v5: 65,536 entries instead of 4,096, 3 MiB: -10% instructions
// and ~+11% single-thread on the mixed corpus, results/2026-11-29-local-v5.txt): direct-mapped,
// for pieces of 2 to 16 bytes whose encoding has at most 4 ids, tokens or not. Frequent words then never touch the 8 MB
// whole-piece table or the pair table (perf: those cache misses were half of the encode time).
// v7: the entry count is the core's (BpeCacheSizes::front_entries), so it can be swept on a
// many-core host where 16 copies of 3 MiB compete for the shared caches.
class FrontCache {
 public:
  static constexpr size_t kMaxBytes = 16;
  static constexpr size_t kMaxIds = 4;
  struct Entry {
    uint64_t k0, k1;
    uint32_t len;  // 0: empty
    uint32_t n;
    uint32_t ids[kMaxIds];
  };
  // The entry for `hash` in the table of `owner`, rebuilt with `entries` entries when the owner
  // changed. The mask lives here, next to owner_, so the hit path loads nothing from the core.
  Entry& entry(uint64_t owner, size_t entries, uint64_t hash) {
    if (owner_ != owner) [[unlikely]] {
      owner_ = owner;
      mask_ = entries - 1;
      entries_.assign(entries, Entry{0, 0, 0, 0, {}});
    }
    return entries_[hash & mask_];
  }

 private:
  uint64_t owner_ = 0, mask_ = 0;
  std::vector<Entry, DefaultInitAllocator<Entry>> entries_;  // huge pages (3 MiB by default)
};

}  // namespace

void BpeCore::encode_piece(std::string_view piece, std::vector<uint32_t>& out) const {
  const size_t n = piece.size();
  if (n == 1) {
    out.push_back(byte_id_[static_cast<uint8_t>(piece[0])]);
    return;
  }
  if (n <= FrontCache::kMaxBytes) {
    uint64_t k0 = 0, k1 = 0;
    const auto* bytes = reinterpret_cast<const uint8_t*>(piece.data());
    if (n <= 8) {
      k0 = load_le(bytes, n);
    } else {
      k0 = load_le(bytes, 8);
      k1 = load_le(bytes + 8, n - 8);
    }
    thread_local FrontCache front;
    FrontCache::Entry& e = front.entry(instance_, cache_sizes_.front_entries,
                                       mix((k0 ^ (k1 * 0x9E3779B97F4A7C15ull) ^ n) * 0xBF58476D1CE4E5B9ull));
    if (e.len == n && e.k0 == k0 && e.k1 == k1) {
      for (uint32_t k = 0; k < e.n; ++k) out.push_back(e.ids[k]);  // inline (v5: insert called memmove)
      return;
    }
    size_t before = out.size();
    encode_piece_slow(piece, out);
    size_t got = out.size() - before;
    if (got <= FrontCache::kMaxIds) {
      e.k0 = k0;
      e.k1 = k1;
      e.len = static_cast<uint32_t>(n);
      e.n = static_cast<uint32_t>(got);
      for (size_t k = 0; k < got; ++k) e.ids[k] = out[before + k];
    }
    return;
  }
  encode_piece_slow(piece, out);
}

void BpeCore::encode_piece_slow(std::string_view piece, std::vector<uint32_t>& out) const {
  uint64_t h = hash_bytes(piece.data(), piece.size());
  // A piece longer than every token with its first byte is no token (o200k: 27 bytes at most for
  // a CJK first byte, so most CJK pieces of 10 characters or more skip the table's cache miss).
  const bool could_be_token = piece.size() <= longest_by_first_byte_[static_cast<uint8_t>(piece[0])] ||
                              longest_by_first_byte_[static_cast<uint8_t>(piece[0])] == 255;
  if (whole_piece_lookup_ && could_be_token) {
    if (std::optional<uint32_t> id = find_token(piece, h)) {
      out.push_back(*id);
      return;
    }
  }
  if (piece.size() > PieceCache::kMaxBytes) {
    merge_piece(piece, out);
    return;
  }
  thread_local PieceCache cache;
  cache.reset(instance_, cache_sizes_.piece_slots);
  if (cache.find(piece, h, out)) return;
  size_t before = out.size();
  merge_piece(piece, out);
  cache.insert(piece, h, out.data() + before, out.size() - before);
}

}  // namespace quill
