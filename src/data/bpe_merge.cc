// The merge algorithms of BpeCore (bpe.h): tiktoken's scan for short pieces, a tournament tree
// for long ones, runs of one byte, and the starting parts (whole characters, bpe_char_parts.h).
#include <algorithm>
#include <bit>
#include <cstring>

#include "data/bpe.h"
#include "data/bpe_hash.h"

namespace quill {

using bpe_detail::mix;

namespace {

// Pieces of at least this many bytes made of at most 4 runs of one byte merge on the runs (v5).
constexpr size_t kRunPiece = 24;

}  // namespace

void BpeCore::merge_piece(std::string_view piece, std::vector<uint32_t>& out, bool force_tree) const {
  const auto* p = reinterpret_cast<const uint8_t*>(piece.data());
  const size_t n = piece.size();
  if (!force_tree && n >= kRunPiece && merge_runs(p, n, out)) return;
  if (n <= kSmallParts) {
    uint32_t ids[kSmallParts];
    uint16_t bytes[kSmallParts];
    const size_t m = char_parts_.split(p, n, byte_id_, ids, bytes);
    if (force_tree) merge_tree(ids, bytes, m, out);
    else merge_small(ids, bytes, m, out);
    return;
  }
  thread_local std::vector<uint32_t> ids;
  thread_local std::vector<uint16_t> bytes;
  ids.resize(n);
  bytes.resize(n);
  const size_t m = char_parts_.split(p, n, byte_id_, ids.data(), bytes.data());
  if (m <= kSmallParts && !force_tree) merge_small(ids.data(), bytes.data(), m, out);
  else merge_tree(ids.data(), bytes.data(), m, out);
}

bool BpeCore::merge_runs(const uint8_t* p, size_t n, std::vector<uint32_t>& out) const {
  // v5: the parts of a piece made of a few runs of one byte ("      ", "  \n\n\n") stay a few
  // runs of equal parts while they merge (every part of a run is the same token, so the run's
  // pairs all have the same rank and its leftmost pair is its first). The merge is done on the
  // runs: the candidates are each run's first pair and each boundary pair, scanned left to right
  // with a strict <, so the pair chosen is the same as in the per-part algorithm (lowest rank,
  // leftmost). A merge turns a run (x, c) into (z, 1) (x, c - 2), or a boundary (x, c) (y, d)
  // into (x, c - 1) (z, 1) (y, d - 1); equal neighbours are joined. When the runs grow past
  // kMaxRuns the piece goes back to the other algorithms (from the start: same result). Merges of
  // a run's first pair are done count / 2 at a time when that is provably the same (below).
  struct Run {
    uint32_t id;
    uint32_t count;
  };
  constexpr size_t kMaxRuns = 24, kMaxInitialRuns = 4;
  Run runs[kMaxRuns + 2];
  size_t m = 0;
  for (size_t i = 0; i < n;) {
    size_t j = i + 1;
    while (j < n && p[j] == p[i]) ++j;
    if (m == kMaxInitialRuns) return false;
    runs[m++] = {byte_id_[p[i]], static_cast<uint32_t>(j - i)};
    i = j;
  }
  // Pair lookups, memoized: a run piece uses few distinct pairs.
  constexpr size_t kMemo = 64;
  struct Memo {
    uint64_t key;
    RankId r;
  };
  Memo memo[kMemo];
  for (Memo& e : memo) e.key = kEmptyKey;
  auto pair = [&](uint32_t a, uint32_t b) -> RankId {
    uint64_t key = (static_cast<uint64_t>(a) << 32) | b;
    Memo& e = memo[(mix(key * 0x9E3779B97F4A7C15ull)) & (kMemo - 1)];
    if (e.key != key) {
      e.key = key;
      e.r = lookup_pair(a, b);
    }
    return e.r;
  };
  for (;;) {
    uint32_t best = kNoId, merged = 0;
    size_t bi = 0;
    bool inner = false;
    for (size_t i = 0; i < m; ++i) {
      if (runs[i].count >= 2) {
        RankId r = pair(runs[i].id, runs[i].id);
        if (r.rank < best) {
          best = r.rank;
          merged = r.id;
          bi = i;
          inner = true;
        }
      }
      if (i + 1 < m) {
        RankId r = pair(runs[i].id, runs[i + 1].id);
        if (r.rank < best) {
          best = r.rank;
          merged = r.id;
          bi = i;
          inner = false;
        }
      }
    }
    if (best == kNoId) break;
    // New runs for positions bi (and bi + 1): at most 3 replace at most 2.
    Run repl[3];
    size_t k = 0, removed;
    if (inner) {
      // The run's next first pair stays the choice while the pairs the merge creates rank
      // higher: (z, z), (z, x) and (left neighbour, z). Then all count / 2 merges go at once
      // (N spaces: a handful of steps instead of N merges).
      const uint32_t x = runs[bi].id;
      uint32_t q = 1;
      if (runs[bi].count >= 4 && pair(merged, merged).rank > best && pair(merged, x).rank > best &&
          (bi == 0 || pair(runs[bi - 1].id, merged).rank > best)) {
        q = runs[bi].count / 2;
      }
      repl[k++] = {merged, q};
      if (runs[bi].count > 2 * q) repl[k++] = {x, runs[bi].count - 2 * q};
      removed = 1;
    } else {
      if (runs[bi].count > 1) repl[k++] = {runs[bi].id, runs[bi].count - 1};
      repl[k++] = {merged, 1};
      if (runs[bi + 1].count > 1) repl[k++] = {runs[bi + 1].id, runs[bi + 1].count - 1};
      removed = 2;
    }
    if (m - removed + k > kMaxRuns) return false;
    // Shift the tail, put the replacement in, then join equal neighbours around it.
    std::memmove(runs + bi + k, runs + bi + removed, (m - bi - removed) * sizeof(Run));
    std::memcpy(runs + bi, repl, k * sizeof(Run));
    m = m - removed + k;
    size_t lo = bi > 0 ? bi - 1 : 0, hi = std::min(m, bi + k + 1), w = lo;
    for (size_t i = lo + 1; i < hi; ++i) {
      if (runs[i].id == runs[w].id) runs[w].count += runs[i].count;
      else runs[++w] = runs[i];
    }
    ++w;
    std::memmove(runs + w, runs + hi, (m - hi) * sizeof(Run));
    m -= hi - w;
  }
  for (size_t i = 0; i < m; ++i) out.insert(out.end(), runs[i].count, runs[i].id);
  return true;
}

namespace {

// The per-thread cache of pair lookups for the compact table (v4): direct-mapped, 65,536 slots
// by default (v5; 16,384 in v4; v7: the core's BpeCacheSizes::pair_slots) of the table's own
// format (key << 24 | rank; rank 0xFFFFFF: the pair does not merge), 512 KiB, so
// the pairs a script keeps using stay in L2 instead of missing in the 8 MiB table (perf: the
// table load was half of merge_small's time).
struct PairCache {
  uint64_t owner = 0;
  std::vector<uint64_t> slots;
  uint64_t* get(uint64_t id, size_t n) {
    if (owner != id) {
      owner = id;
      slots.assign(n, ~0ull);
    }
    return slots.data();
  }
};

// One per thread, shared by merge_small and merge_tree.
uint64_t* thread_pair_cache(uint64_t owner, size_t slots) {
  thread_local PairCache pair_cache;
  return pair_cache.get(owner, slots);
}

}  // namespace

inline BpeCore::RankId BpeCore::cached_pair(uint64_t* cache, uint32_t left, uint32_t right) const {
  if (cache == nullptr) return lookup_pair(left, right);
  const uint64_t key = (static_cast<uint64_t>(left) << 20) | right;
  const uint64_t h = mix(key * 0x9E3779B97F4A7C15ull);
  uint64_t& c = cache[h & (cache_sizes_.pair_slots - 1)];
  if ((c >> 24) != key && !may_be_pair(h)) {
    c = (key << 24) | 0xFFFFFF;
  } else if ((c >> 24) != key) {
    for (uint64_t i = h & pair_mask_;; i = (i + 1) & pair_mask_) {
      const uint64_t s = pairs8_[i];
      if ((s >> 24) == key) {
        c = s;
        break;
      }
      if (s == kEmptyKey) {
        c = (key << 24) | 0xFFFFFF;
        break;
      }
    }
  }
  const uint32_t rank = static_cast<uint32_t>(c & 0xFFFFFF);
  if (rank == 0xFFFFFF) return {kNoId, kNoId};
  return {rank, rank_to_id_.empty() ? rank : rank_to_id_[rank]};
}

void BpeCore::merge_small(const uint32_t* start, const uint16_t* bytes, size_t m, std::vector<uint32_t>& out) const {
  // ids[i]: part i; pr[i]: (rank, merged id) of the pair (i, i+1).
  uint32_t ids[kSmallParts];
  RankId pr[kSmallParts];
  std::copy_n(start, m, ids);
  uint64_t* cache = nullptr;
  const uint64_t cache_mask = cache_sizes_.pair_slots - 1;
  if (compact_) {
    cache = thread_pair_cache(instance_, cache_sizes_.pair_slots);
  }
  constexpr uint64_t kNoRank = 0xFFFFFF;
  auto decode = [&](uint64_t slot) -> RankId {
    uint32_t rank = static_cast<uint32_t>(slot & 0xFFFFFF);
    if (rank == kNoRank) return {kNoId, kNoId};
    return {rank, rank_to_id_.empty() ? rank : rank_to_id_[rank]};
  };
  auto probe = [&](uint64_t key, uint64_t h) -> uint64_t {  // the table's slot for key, or key << 24 | kNoRank
    if (!may_be_pair(h)) return (key << 24) | kNoRank;
    for (uint64_t i = h & pair_mask_;; i = (i + 1) & pair_mask_) {
      uint64_t s = pairs8_[i];
      if ((s >> 24) == key) return s;
      if (s == kEmptyKey) return (key << 24) | kNoRank;
    }
  };
  // The first pairs: two bytes from the byte-pair table; pairs with a whole character through the
  // pair cache, the table loads of all its misses issued before any is used (cold CJK text: most
  // of its first pairs are new, and one load after the other they were the merge's time).
  {
    uint8_t missed[kSmallParts];
    size_t n_missed = 0;
    for (size_t i = 0; i + 1 < m; ++i) {
      if (bytes[i] < CharParts::kCharBase && bytes[i + 1] < CharParts::kCharBase) {
        pr[i] = byte_pairs_[(bytes[i] << 8) | bytes[i + 1]];
        continue;
      }
      if (bytes[i] >= CharParts::kCharBase && bytes[i + 1] >= CharParts::kCharBase &&
          !char_parts_.may_pair(bytes[i], ids[i + 1])) {
        pr[i] = {kNoId, kNoId};
        continue;
      }
      if (cache == nullptr) {
        pr[i] = lookup_pair(ids[i], ids[i + 1]);
        continue;
      }
      const uint64_t key = (static_cast<uint64_t>(ids[i]) << 20) | ids[i + 1];
      const uint64_t h = mix(key * 0x9E3779B97F4A7C15ull);
      const uint64_t c = cache[h & cache_mask];
      if ((c >> 24) == key) {
        pr[i] = decode(c);
      } else {
        if (may_be_pair(h)) __builtin_prefetch(&pairs8_[h & pair_mask_]);
        missed[n_missed++] = static_cast<uint8_t>(i);
      }
    }
    for (size_t k = 0; k < n_missed; ++k) {
      const size_t i = missed[k];
      const uint64_t key = (static_cast<uint64_t>(ids[i]) << 20) | ids[i + 1];
      const uint64_t h = mix(key * 0x9E3779B97F4A7C15ull);
      const uint64_t s = probe(key, h);
      cache[h & cache_mask] = s;
      pr[i] = decode(s);
    }
  }
  while (m > 1) {
    uint32_t best = kNoId;
    size_t bi = 0;
    for (size_t i = 0; i + 1 < m; ++i) {
      if (pr[i].rank < best) {
        best = pr[i].rank;
        bi = i;
      }
    }
    if (best == kNoId) break;
    ids[bi] = pr[bi].id;
    // Remove part bi+1 and the pair (bi+1, bi+2).
    for (size_t i = bi + 1; i + 1 < m; ++i) ids[i] = ids[i + 1];
    for (size_t i = bi + 1; i + 2 < m; ++i) pr[i] = pr[i + 1];
    --m;
    const bool right = bi + 1 < m, left = bi > 0;
    if (cache == nullptr) {
      if (right) pr[bi] = lookup_pair(ids[bi], ids[bi + 1]);
      if (left) pr[bi - 1] = lookup_pair(ids[bi - 1], ids[bi]);
      continue;
    }
    // Both neighbours: cache first; the table loads of both misses are issued before either is
    // used, so their latencies overlap.
    uint64_t kr = 0, hr = 0, kl = 0, hl = 0;
    bool miss_r = false, miss_l = false;
    if (right) {
      kr = (static_cast<uint64_t>(ids[bi]) << 20) | ids[bi + 1];
      hr = mix(kr * 0x9E3779B97F4A7C15ull);
      uint64_t c = cache[hr & cache_mask];
      if ((c >> 24) == kr) pr[bi] = decode(c);
      else {
        miss_r = true;
        if (may_be_pair(hr)) __builtin_prefetch(&pairs8_[hr & pair_mask_]);
      }
    }
    if (left) {
      kl = (static_cast<uint64_t>(ids[bi - 1]) << 20) | ids[bi];
      hl = mix(kl * 0x9E3779B97F4A7C15ull);
      uint64_t c = cache[hl & cache_mask];
      if ((c >> 24) == kl) pr[bi - 1] = decode(c);
      else {
        miss_l = true;
        if (may_be_pair(hl)) __builtin_prefetch(&pairs8_[hl & pair_mask_]);
      }
    }
    if (miss_r) {
      uint64_t s = probe(kr, hr);
      cache[hr & cache_mask] = s;
      pr[bi] = decode(s);
    }
    if (miss_l) {
      uint64_t s = probe(kl, hl);
      cache[hl & cache_mask] = s;
      pr[bi - 1] = decode(s);
    }
  }
  for (size_t i = 0; i < m; ++i) out.push_back(ids[i]);  // mostly 1-4 ids: no memmove call (v5)
}

void BpeCore::merge_tree(const uint32_t* ids, const uint16_t* bytes, size_t n, std::vector<uint32_t>& out) const {
  // Parts form a linked list; node i is starting part i and knows the rank and
  // merged id of the pair it starts. A tournament tree over the nodes holds each pair's key
  // rank << 32 | i (kEmpty for none), so the root is the lowest rank, leftmost on a tie: the pair
  // to merge. A merge changes three leaves, each an O(log n) branch-free climb (a binary heap
  // with lazy deletion spent its time in mispredicted sift branches).
  struct Node {
    uint32_t id;
    uint32_t prev;  // kNoId: none
    uint32_t next;  // n: none
    uint32_t merged;
  };
  constexpr uint64_t kEmpty = ~0ull;
  thread_local std::vector<Node> nodes;
  thread_local std::vector<uint64_t> tree;
  const uint32_t end = static_cast<uint32_t>(n);
  const size_t size = std::bit_ceil(n);
  nodes.resize(n);
  tree.assign(2 * size, kEmpty);
  // v5: the pair lookups go through the per-thread pair cache too (as in merge_small).
  uint64_t* cache = compact_ ? thread_pair_cache(instance_, cache_sizes_.pair_slots) : nullptr;
  for (uint32_t i = 0; i < end; ++i) {
    RankId r{kNoId, kNoId};
    if (i + 1 < end) {
      if (bytes[i] < CharParts::kCharBase && bytes[i + 1] < CharParts::kCharBase) {
        r = byte_pairs_[(bytes[i] << 8) | bytes[i + 1]];
      } else if (bytes[i] < CharParts::kCharBase || bytes[i + 1] < CharParts::kCharBase ||
                 char_parts_.may_pair(bytes[i], ids[i + 1])) {
        r = cached_pair(cache, ids[i], ids[i + 1]);
      }
    }
    nodes[i] = {ids[i], i == 0 ? kNoId : i - 1, i + 1, r.id};
    if (r.rank != kNoId) tree[size + i] = (static_cast<uint64_t>(r.rank) << 32) | i;
  }
  for (size_t x = size - 1; x >= 1; --x) tree[x] = std::min(tree[2 * x], tree[2 * x + 1]);
  auto set_leaf = [&](uint32_t i, uint64_t key) {
    size_t x = size + i;
    tree[x] = key;
    // Stop at the first node whose minimum does not change: the ones above it cannot either.
    for (x >>= 1; x >= 1; x >>= 1) {
      uint64_t v = std::min(tree[2 * x], tree[2 * x + 1]);
      if (tree[x] == v) break;
      tree[x] = v;
    }
  };
  auto update = [&](uint32_t i) {  // recomputes the pair node i starts
    Node& a = nodes[i];
    RankId r = a.next != end ? cached_pair(cache, a.id, nodes[a.next].id) : RankId{kNoId, kNoId};
    a.merged = r.id;
    set_leaf(i, r.rank == kNoId ? kEmpty : (static_cast<uint64_t>(r.rank) << 32) | i);
  };
  while (tree[1] != kEmpty) {
    uint32_t i = static_cast<uint32_t>(tree[1]);
    Node& a = nodes[i];
    uint32_t j = a.next;
    a.id = a.merged;
    a.next = nodes[j].next;
    if (a.next != end) nodes[a.next].prev = i;
    set_leaf(j, kEmpty);
    update(i);
    if (a.prev != kNoId) update(a.prev);
  }
  for (uint32_t i = 0; i != end; i = nodes[i].next) out.push_back(nodes[i].id);
}


}  // namespace quill
