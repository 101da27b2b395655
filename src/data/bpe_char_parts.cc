#include "data/bpe_char_parts.h"

#include <algorithm>
#include <atomic>
#include <string_view>

#include "base/thread_pool.h"
#include "data/bpe.h"

namespace quill {

namespace {

constexpr uint32_t kNone = 0xFFFFFFFFu;
constexpr size_t kCodePoints = 0x10000;

inline bool is_cont(uint8_t b) { return (b & 0xC0) == 0x80; }

// The code point of s when s is exactly one well-formed character of 2 or 3 bytes (no overlong
// form, no surrogate); kNone otherwise.
uint32_t one_char(std::string_view s) {
  const auto* u = reinterpret_cast<const uint8_t*>(s.data());
  if (s.size() == 2 && u[0] >= 0xC2 && u[0] < 0xE0 && is_cont(u[1])) return ((u[0] & 0x1Fu) << 6) | (u[1] & 0x3Fu);
  if (s.size() == 3 && (u[0] & 0xF0) == 0xE0 && is_cont(u[1]) && is_cont(u[2])) {
    uint32_t cp = ((u[0] & 0x0Fu) << 12) | ((u[1] & 0x3Fu) << 6) | (u[2] & 0x3Fu);
    if (cp >= 0x800 && (cp < 0xD800 || cp > 0xDFFF)) return cp;
  }
  return kNone;
}

// The candidate tables of rule (a), as numbered in build().
enum Table : uint8_t { kEndsInLead = 0, kEndsInLead2 = 1, kStartsWithCont = 2, kStartsWithCont2 = 3 };
constexpr size_t kTableSize[4] = {64, 1024, 64, 4096};
// Token ids per parallel task of build().
constexpr size_t kChunk = 8192;

}  // namespace

CharParts CharParts::build(const BpeCore& core, ThreadPool* pool) {
  ThreadPool one(1);
  ThreadPool& p = pool ? *pool : one;
  CharParts cp;
  const size_t n = core.id_count();
  const size_t chunks = (n + kChunk - 1) / kChunk;
  auto ids_of = [&](size_t chunk) { return std::pair<uint32_t, uint32_t>(chunk * kChunk, std::min(n, (chunk + 1) * kChunk)); };
  // longer[c]: the lowest rank (= id) of a token longer than c's that begins or ends with c's
  // bytes (an atomic minimum: the same whatever the threads).
  std::vector<uint32_t> longer(kCodePoints, kNone);
  struct Candidate {
    uint8_t table;
    uint16_t index;
    uint32_t id;
  };
  std::vector<std::vector<Candidate>> found(chunks);
  p.parallel_for(chunks, [&](size_t chunk) {
    auto [lo, hi] = ids_of(chunk);
    for (uint32_t id = lo; id < hi; ++id) {
      std::string_view t = core.token_bytes(id);
      const size_t len = t.size();
      if (len < 2) continue;
      const auto* u = reinterpret_cast<const uint8_t*>(t.data());
      if (u[0] < 0x80 && u[len - 1] < 0x80) continue;  // nothing below needs an ASCII end (most tokens)
      std::vector<Candidate>& f = found[chunk];
      if (u[len - 1] >= 0xC0) f.push_back({kEndsInLead, static_cast<uint16_t>(u[len - 1] & 0x3F), id});
      if (len >= 3 && (u[len - 2] & 0xF0) == 0xE0 && is_cont(u[len - 1])) {
        f.push_back({kEndsInLead2, static_cast<uint16_t>(((u[len - 2] & 0xF) << 6) | (u[len - 1] & 0x3F)), id});
      }
      if (is_cont(u[0])) f.push_back({kStartsWithCont, static_cast<uint16_t>(u[0] & 0x3F), id});
      if (len >= 3 && is_cont(u[0]) && is_cont(u[1])) {
        f.push_back({kStartsWithCont2, static_cast<uint16_t>(((u[0] & 0x3F) << 6) | (u[1] & 0x3F)), id});
      }
      for (size_t k : {size_t{2}, size_t{3}}) {
        if (len <= k) continue;
        for (uint32_t c : {one_char(t.substr(0, k)), one_char(t.substr(len - k))}) {
          if (c == kNone) continue;
          std::atomic_ref<uint32_t> low(longer[c]);
          for (uint32_t v = low.load(std::memory_order_relaxed);
               id < v && !low.compare_exchange_weak(v, id, std::memory_order_relaxed);) {
          }
        }
      }
    }
  });
  // The characters that may start whole, in id order (so their indices do not depend on the
  // threads either).
  std::vector<std::vector<std::pair<uint32_t, uint32_t>>> usable(chunks);  // (code point, id)
  p.parallel_for(chunks, [&](size_t chunk) {
    auto [lo, hi] = ids_of(chunk);
    for (uint32_t id = std::max<uint32_t>(lo, 1); id < hi; ++id) {
      std::string_view t = core.token_bytes(id);
      if (t.size() < 2 || t.size() > 3 || static_cast<uint8_t>(t[0]) < 0xC2) continue;
      const uint32_t c = one_char(t);
      if (c == kNone) continue;
      // Rule (b): c's own merge ends in t_c; R is the highest rank it uses.
      uint32_t r = id;
      if (t.size() == 3) {
        std::optional<uint32_t> a = core.find_token(t.substr(0, 2)), b = core.find_token(t.substr(1));
        if (!a && !b) continue;  // c alone stays three bytes
        r = std::max(r, std::min(a.value_or(kNone), b.value_or(kNone)));
      }
      if (longer[c] <= r) continue;  // rule (c)
      usable[chunk].push_back({c, id});
    }
  });
  cp.index_of_.assign(kCodePoints, 0);
  for (const auto& u : usable) {
    for (auto [c, id] : u) {
      if (cp.chars_.size() == kMaxChars) break;
      cp.chars_.push_back({id, 0, 0, 0, 0});
      cp.index_of_[c] = static_cast<uint16_t>(cp.chars_.size());
    }
  }
  if (cp.chars_.empty()) {
    cp.index_of_.clear();
    return cp;
  }
  std::vector<Candidate> all;
  for (const auto& f : found) all.insert(all.end(), f.begin(), f.end());
  std::sort(all.begin(), all.end(), [](const Candidate& a, const Candidate& b) {
    return a.table != b.table ? a.table < b.table : a.index != b.index ? a.index < b.index : a.id < b.id;
  });
  std::vector<Span>* tables[4] = {&cp.ends_in_lead_, &cp.ends_in_lead2_, &cp.starts_with_cont_, &cp.starts_with_cont2_};
  for (int k = 0; k < 4; ++k) tables[k]->assign(kTableSize[k], Span{});
  cp.offsets_.assign(1, 0);
  for (size_t k = 0; k < all.size(); ++k) {
    const Candidate& f = all[k];
    Span& s = (*tables[f.table])[f.index];
    if (s.count == 0) s.begin = static_cast<uint32_t>(k);
    ++s.count;
    cp.bytes_ += core.token_bytes(f.id);
    cp.offsets_.push_back(static_cast<uint32_t>(cp.bytes_.size()));
  }
  // The partner filters, from the tokens of exactly two whole characters (an atomic OR).
  auto char_index = [&](std::string_view s) -> int {
    const uint32_t c = one_char(s);
    return c == kNone ? -1 : cp.index_of_[c] - 1;
  };
  p.parallel_for(chunks, [&](size_t chunk) {
    auto [lo, hi] = ids_of(chunk);
    for (uint32_t id = lo; id < hi; ++id) {
      std::string_view t = core.token_bytes(id);
      if (t.size() < 4 || t.size() > 6) continue;
      const uint8_t b = static_cast<uint8_t>(t[0]);
      const size_t first = b >= 0xC2 && b < 0xE0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : 0;
      if (first == 0 || t.size() - first < 2) continue;
      const int a = char_index(t.substr(0, first)), d = char_index(t.substr(first));
      if (a >= 0 && d >= 0) {
        std::atomic_ref<uint64_t>(cp.chars_[a].partners)
            .fetch_or(uint64_t{1} << partner_bit(cp.chars_[d].id), std::memory_order_relaxed);
      }
    }
  });
  // Each character's anchor bits: the byte of X next to q (left) or of Y next to s (right).
  auto bits = [&](const Span& s, size_t j, bool left) {
    uint64_t b = 0;
    for (uint32_t k = s.begin; k < s.begin + s.count; ++k) {
      const auto* t = reinterpret_cast<const uint8_t*>(cp.bytes_.data()) + cp.offsets_[k];
      const size_t len = cp.offsets_[k + 1] - cp.offsets_[k];
      b |= uint64_t{1} << ((left ? t[len - j - 1] : t[j]) & 63);
    }
    return b;
  };
  for (Char& e : cp.chars_) {
    std::string_view t = core.token_bytes(e.id);
    const auto* u = reinterpret_cast<const uint8_t*>(t.data());
    e.left_bits = bits(cp.ends_in_lead_[u[0] & 0x3F], 1, true);
    e.right_bits = bits(cp.starts_with_cont_[u[t.size() - 1] & 0x3F], 1, false);
    if (t.size() == 3) {
      e.left_bits |= bits(cp.ends_in_lead2_[((u[0] & 0xF) << 6) | (u[1] & 0x3F)], 2, true);
      e.right_bits |= bits(cp.starts_with_cont2_[((u[1] & 0x3F) << 6) | (u[2] & 0x3F)], 2, false);
    }
  }
  return cp;
}

bool CharParts::occurs(const uint8_t* p, size_t n, size_t start, uint32_t k) const {
  const size_t len = offsets_[k + 1] - offsets_[k];
  if (start + len > n) return false;
  const auto* t = reinterpret_cast<const uint8_t*>(bytes_.data()) + offsets_[k];
  for (size_t j = 0; j < len; ++j) {
    if (p[start + j] != t[j]) return false;
  }
  return true;
}

bool CharParts::sealed(const Char& c, const uint8_t* p, size_t n, size_t i, size_t len) const {
  // A token X + q, q = c's first j bytes, would end at i + j; a token s + Y, s = c's last j
  // bytes, would start at i + len - j.
  auto crossed_left = [&](const Span& s, size_t j) {
    for (uint32_t k = s.begin; k < s.begin + s.count; ++k) {
      const size_t t = offsets_[k + 1] - offsets_[k];
      if (i + j >= t && occurs(p, n, i + j - t, k)) return true;
    }
    return false;
  };
  auto crossed_right = [&](const Span& s, size_t j) {
    for (uint32_t k = s.begin; k < s.begin + s.count; ++k) {
      if (occurs(p, n, i + len - j, k)) return true;
    }
    return false;
  };
  if (i > 0 && ((c.left_bits >> (p[i - 1] & 63)) & 1)) {
    if (crossed_left(ends_in_lead_[p[i] & 0x3F], 1)) return false;
    if (len == 3 && crossed_left(ends_in_lead2_[((p[i] & 0xF) << 6) | (p[i + 1] & 0x3F)], 2)) return false;
  }
  if (i + len < n && ((c.right_bits >> (p[i + len] & 63)) & 1)) {
    if (crossed_right(starts_with_cont_[p[i + len - 1] & 0x3F], 1)) return false;
    if (len == 3 && crossed_right(starts_with_cont2_[((p[i + 1] & 0x3F) << 6) | (p[i + 2] & 0x3F)], 2)) return false;
  }
  return true;
}

size_t CharParts::split(const uint8_t* p, size_t n, const uint32_t* byte_id, uint32_t* ids, uint16_t* bytes) const {
  size_t m = 0;
  for (size_t i = 0; i < n;) {
    const uint8_t b = p[i];
    if (b >= 0xC2 && b < 0xF0 && !index_of_.empty()) {
      const size_t len = b < 0xE0 ? 2 : 3;
      uint32_t c = kNone;
      if (len == 2 && i + 2 <= n && is_cont(p[i + 1])) {
        c = ((b & 0x1Fu) << 6) | (p[i + 1] & 0x3Fu);
      } else if (len == 3 && i + 3 <= n && is_cont(p[i + 1]) && is_cont(p[i + 2])) {
        c = ((b & 0x0Fu) << 12) | ((p[i + 1] & 0x3Fu) << 6) | (p[i + 2] & 0x3Fu);
        if (c < 0x800) c = kNone;  // overlong: not the character of that code point
      }
      if (c != kNone) {
        const uint16_t k = index_of_[c];
        if (k != 0 && sealed(chars_[k - 1], p, n, i, len)) {
          ids[m] = chars_[k - 1].id;
          bytes[m++] = static_cast<uint16_t>(kCharBase + k - 1);
          i += len;
          continue;
        }
      }
    }
    ids[m] = byte_id[b];
    bytes[m++] = b;
    ++i;
  }
  return m;
}

}  // namespace quill
