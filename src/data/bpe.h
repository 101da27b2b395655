// Byte-pair encoding of one pre-split piece, shared by the tiktoken and Hugging Face loaders.
//
// The algorithm is tiktoken's (and Hugging Face's): start from one part per byte; repeatedly take
// the adjacent pair of parts with the lowest merge rank, the leftmost one on a tie, and merge it;
// stop when no adjacent pair can merge. The result is the ids of the parts.
//
// Merges are held as a table (left id, right id) -> (rank, merged id):
//   tiktoken: a pair merges when the concatenation of its bytes is a token; its rank is that
//             token's rank (= id). The table lists every split of every token into two tokens.
//   HF:       the merges list; the rank of a pair is its index in the list.
// With whole_piece_lookup (always for tiktoken; HF's ignore_merges) a piece that is itself a
// token is emitted directly, without merging, as tiktoken does.
//
// Pieces that are not tokens are cached per thread (pieces up to 256 bytes, 8192 of them,
// pieces, flushed when full): real text repeats its rare words. In front of everything, a
// per-thread direct-mapped cache of 65,536 pieces of 2 to 16 bytes (tokens or not, up to 4 ids;
// 3 MiB a thread, v5; 4,096 in v4) keeps frequent words off the large tables. v7: the sizes of the
// per-thread caches are the core's (bpe_cache_sizes.h: QUILL_BPE_* variables by default).
//
// A merge starts from one part per byte, or per whole character where that provably gives the
// same result (tiktoken vocabularies, v10: bpe_char_parts.h; CJK pieces then start with a third
// of the parts). Pieces of few parts use tiktoken's quadratic scan over a small array; more
// parts (long CJK runs) use a tournament tree over the pairs, whose root is the same pair, so the
// result is identical (tested against each other and a plain reference). Pieces of at most 4 runs of one
// byte (whitespace runs) merge on the runs (v5, merge_runs), also tested against the reference.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "data/bpe_cache_sizes.h"
#include "data/bpe_char_parts.h"
#include "data/bpe_hash.h"
#include "base/thread_pool.h"

namespace quill {

// 64-bit hash of a byte string (multiply-mix over 8-byte words).
uint64_t hash_bytes(const void* data, size_t n);

// The bytes of every token id side by side: id's bytes are blob[offsets[id], offsets[id + 1])
// (empty: the id is no BPE token). What the rank-file reader makes and the core keeps.
struct TokenBytes {
  std::string blob;
  std::vector<uint32_t> offsets;  // ids + 1 entries, offsets[0] = 0

  size_t size() const { return offsets.empty() ? 0 : offsets.size() - 1; }
  std::string_view at(size_t id) const {
    return std::string_view(blob).substr(offsets[id], offsets[id + 1] - offsets[id]);
  }
  // Errors name `source` (more than 4 GiB of bytes).
  static TokenBytes from_strings(const std::vector<std::string>& tokens, const std::string& source);
};

void* huge_page_allocate(size_t bytes);
void huge_page_free(void* p, size_t bytes);

// An allocator whose vectors grow without value-initialising their elements, for tables that
// are then filled on all threads (a serial zero-fill would be serial work, and page faults, that
// grow with the table).
template <typename T>
struct DefaultInitAllocator : std::allocator<T> {
  template <typename U>
  struct rebind {
    using other = DefaultInitAllocator<U>;
  };
  T* allocate(size_t n) { return static_cast<T*>(huge_page_allocate(n * sizeof(T))); }
  void deallocate(T* p, size_t n) { huge_page_free(p, n * sizeof(T)); }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    if constexpr (sizeof...(Args) == 0) {
      ::new (static_cast<void*>(p)) U;
    } else {
      ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
    }
  }
};

class BpeCore {
 public:
  static constexpr uint32_t kNoId = 0xFFFFFFFFu;

  // tokens[id] = the token's bytes; an empty string marks an id that is no BPE token. Every
  // single byte must be a token. Errors name `source`. The tables are built on `pool` (null:
  // this thread); the core, and any error, are the same whatever its thread count.
  static BpeCore from_ranks(TokenBytes tokens, const std::string& source, ThreadPool* pool = nullptr);
  static BpeCore from_ranks(const std::vector<std::string>& tokens, const std::string& source,
                            ThreadPool* pool = nullptr) {
    return from_ranks(TokenBytes::from_strings(tokens, source), source, pool);
  }
  // merges: (left id, right id) in priority order; the merged bytes must be a token.
  static BpeCore from_merges(std::vector<std::string> tokens, const std::vector<std::pair<uint32_t, uint32_t>>& merges,
                             bool whole_piece_lookup, const std::string& source, ThreadPool* pool = nullptr);

  // Pieces of up to this many starting parts (bytes, or whole characters: bpe_char_parts.h) merge
  // in the quadratic scan, on stack arrays; more in the tournament tree. The crossover was
  // measured on mixed text when parts were bytes (docs/tokenizer.md).
  static constexpr size_t kSmallParts = 96;

  // Appends the ids of one piece (non-empty).
  void encode_piece(std::string_view piece, std::vector<uint32_t>& out) const;
  // The merge algorithm alone (no whole-piece lookup), choosing the small or the tree variant;
  // `force_tree` is for tests.
  void merge_piece(std::string_view piece, std::vector<uint32_t>& out, bool force_tree = false) const;

  std::optional<uint32_t> find_token(std::string_view bytes) const {
    return find_token(bytes, hash_bytes(bytes.data(), bytes.size()));
  }
  std::optional<uint32_t> find_token(std::string_view bytes, uint64_t hash) const;
  // The bytes of `id` (empty when id is no BPE token).
  std::string_view token_bytes(uint32_t id) const {
    return id + 1 < offsets_.size() ? std::string_view(blob_).substr(offsets_[id], offsets_[id + 1] - offsets_[id])
                                    : std::string_view();
  }
  size_t id_count() const { return offsets_.empty() ? 0 : offsets_.size() - 1; }
  size_t pair_count() const { return pair_count_; }
  bool whole_piece_lookup() const { return whole_piece_lookup_; }

  // The sizes of the per-thread caches this core's encodes use (BpeCacheSizes::from_env() when
  // built). Setting them gives the core a new identity, so each thread's caches are rebuilt at
  // that size on their next use. Not while another thread encodes with this core.
  const BpeCacheSizes& cache_sizes() const { return cache_sizes_; }
  void set_cache_sizes(const BpeCacheSizes& sizes);

  // An empty core with an identity of its own and the environment's cache sizes (as from_ranks
  // gives), for the table file (bpe_table_file.h) to fill through for_each_table.
  static BpeCore unbuilt();
  // Calls f on every table and scalar a build makes, in one fixed order (the table file's
  // layout): f(std::string&), f(std::vector<T, A>&), f(T (&)[N]) or f(scalar&), with Self either
  // BpeCore or const BpeCore. Not the per-process state (cache_sizes_, instance_). A member added
  // to the class must be added here too (bpe_table_file.cc checks the class's size).
  template <typename Self, typename F>
  static void for_each_table(Self& core, F&& f) {
    f(core.blob_);
    f(core.offsets_);
    f(core.byte_id_);
    f(core.longest_by_first_byte_);
    f(core.pieces_);
    f(core.piece_mask_);
    CharParts::for_each_table(core.char_parts_, f);
    f(core.byte_pairs_);
    f(core.pairs_);
    f(core.pair_mask_);
    f(core.pairs8_);
    f(core.rank_to_id_);
    f(core.pair_filter_);
    f(core.piece_filter_);
    f(core.compact_);
    f(core.pair_count_);
    f(core.whole_piece_lookup_);
  }

 private:
  struct RankId {
    uint32_t rank;  // kNoId: the pair does not merge
    uint32_t id;    // the merged token
  };
  struct PairSlot {
    uint64_t key;  // left << 32 | right; kEmptyKey when free
    uint32_t rank;
    uint32_t id;
  };
  // A token of the whole-piece table, with its first bytes inline so that most lookups touch
  // one cache line (tokens up to 8 bytes never read the blob).
  struct PieceSlot {
    uint64_t head;  // the first min(len, 8) bytes, zero-padded
    uint32_t id;    // kNoId when free
    uint32_t len;
  };
  static constexpr uint64_t kEmptyKey = ~0ull;

  void set_tokens(TokenBytes tokens, const std::string& source, ThreadPool& pool);
  void build_piece_table(const std::string& source, ThreadPool& pool);
  void reserve_pairs(size_t n);
  void add_pair(uint32_t left, uint32_t right, uint32_t rank, uint32_t id);
  // (rank, merged id) of a pair, or rank kNoId.
  inline RankId lookup_pair(uint32_t left, uint32_t right) const;
  void build_byte_pairs(ThreadPool& pool);
  void compact_pairs();
  void encode_piece_slow(std::string_view piece, std::vector<uint32_t>& out) const;  // n >= 2, no front cache
  // The merges from starting parts (ids; bytes as CharParts::split gives them: a byte, or
  // kCharBase + a character's index), m >= 1 of them; merge_small needs m <= kSmallParts.
  void merge_small(const uint32_t* ids, const uint16_t* bytes, size_t m, std::vector<uint32_t>& out) const;
  void merge_tree(const uint32_t* ids, const uint16_t* bytes, size_t m, std::vector<uint32_t>& out) const;
  // A pair through the per-thread pair cache `cache` (null: the table alone).
  inline RankId cached_pair(uint64_t* cache, uint32_t left, uint32_t right) const;
  // Pieces made of a few runs of one byte (whitespace runs): false when it does not apply.
  bool merge_runs(const uint8_t* p, size_t n, std::vector<uint32_t>& out) const;

  std::string blob_;               // all token bytes, by id
  std::vector<uint32_t> offsets_;  // token id's bytes: blob_[offsets_[id], offsets_[id+1])
  uint32_t byte_id_[256] = {};
  uint8_t longest_by_first_byte_[256] = {};  // the longest token that starts with the byte (255: 255 or more)
  std::vector<PieceSlot, DefaultInitAllocator<PieceSlot>> pieces_;
  uint64_t piece_mask_ = 0;
  CharParts char_parts_;  // tiktoken vocabularies: characters that may start whole (empty: bytes)
  std::vector<RankId> byte_pairs_;  // the pair of two single bytes a, b at a << 8 | b (the first merges)
  std::vector<PairSlot> pairs_;
  uint64_t pair_mask_ = 0;
  // The compact form of the pair table, used when ids < 2^20 and ranks < 2^24 (o200k: half the
  // memory, so fewer cache misses, which is where merging spends its time): one u64 per slot,
  // left << 44 | right << 24 | rank; the merged id is the rank (tiktoken) or rank_to_id_[rank].
  std::vector<uint64_t, DefaultInitAllocator<uint64_t>> pairs8_;
  std::vector<uint32_t> rank_to_id_;  // empty: the merged id is the rank
  // Bloom filters of the compact pair table's keys and of the whole-piece table's tokens (two
  // bits of one word per key, from the bits of the table's hash above those its index uses): a
  // key whose bits are not both set is surely absent, so on cold text most lookups of pairs that
  // do not merge and of pieces that are no token stop in these 512 KiB instead of missing in an
  // 8 MiB table. An empty pair filter: not built (every lookup goes to the table).
  static constexpr size_t kFilterWords = size_t{1} << 16;
  std::vector<uint64_t> pair_filter_, piece_filter_;
  static size_t filter_word(uint64_t h) { return (h >> 40) & (kFilterWords - 1); }
  static uint64_t filter_bits(uint64_t h) { return (uint64_t{1} << ((h >> 28) & 63)) | (uint64_t{1} << ((h >> 34) & 63)); }
  bool may_be_pair(uint64_t h) const {
    return pair_filter_.empty() || (pair_filter_[filter_word(h)] & filter_bits(h)) == filter_bits(h);
  }
  bool compact_ = false;
  size_t pair_count_ = 0;
  bool whole_piece_lookup_ = true;
  BpeCacheSizes cache_sizes_;
  uint64_t instance_ = 0;  // tells the per-thread caches of different vocabularies (and sizes) apart
};

inline BpeCore::RankId BpeCore::lookup_pair(uint32_t left, uint32_t right) const {
  if (compact_) {
    uint64_t key = (static_cast<uint64_t>(left) << 20) | right;
    for (uint64_t i = bpe_detail::mix(key * 0x9E3779B97F4A7C15ull) & pair_mask_;; i = (i + 1) & pair_mask_) {
      uint64_t s = pairs8_[i];
      if ((s >> 24) == key) {
        uint32_t rank = static_cast<uint32_t>(s & 0xFFFFFF);
        return {rank, rank_to_id_.empty() ? rank : rank_to_id_[rank]};
      }
      if (s == kEmptyKey) return {kNoId, kNoId};
    }
  }
  uint64_t key = (static_cast<uint64_t>(left) << 32) | right;
  for (uint64_t i = bpe_detail::mix(key * 0x9E3779B97F4A7C15ull) & pair_mask_;; i = (i + 1) & pair_mask_) {
    const PairSlot& s = pairs_[i];
    if (s.key == key) return {s.rank, s.id};
    if (s.key == kEmptyKey) return {kNoId, kNoId};
  }
}

}  // namespace quill
