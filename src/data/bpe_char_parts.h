// Whole characters as the starting parts of a byte-pair merge (tiktoken vocabularies), where that
// provably gives the same ids as starting from single bytes.
//
// Why: a CJK piece of k characters is 3k bytes, so tiktoken's merge starts with 3k parts and
// spends two thirds of its merges (and pair lookups, and scans) joining each character's bytes;
// on cold CJK text that was most of the encode time. Starting a character c as its token t_c
// instead is exact when, at its position in the piece:
//   (a) no token that could be a part crosses one of c's edges: no token X + q ending in a proper
//       prefix q of c's bytes occurs ending inside c, and no token s + Y starting with a proper
//       suffix s of c's bytes occurs starting inside c (checked on the piece's actual bytes, from
//       short candidate lists: o200k has ~700 such tokens, like " \xe5" or "\x97\xe4\xba\xac");
//   (b) c's own merge, alone, ends in t_c (its bytes: b0b1 or b1b2 a token, then t_c); and
//   (c) every token that begins or ends with t_c's bytes and is longer ranks after R_c, the
//       highest rank among c's own merges.
// Then, by (a), c's bytes only ever merge with each other, in the order they would alone; and by
// (c), none of the pairs that t_c forms early with its neighbours (t_c exists from the start
// instead of from c's last merge) can be chosen before a pair the byte-level merge would choose
// while c is still incomplete: those rank at most R_c. So both merges pick the same pair at every
// step (ties included: equal ranks name the same token) and end in the same parts.
// Characters of 2 and 3 bytes (U+0080..U+FFFF) are covered; others start as bytes.
// Tests: tests/data/bpe_char_parts_test.cc (a reference merge on random and adversarial pieces,
// with and without the character start) and the o200k golden ids.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace quill {

class BpeCore;
class ThreadPool;

class CharParts {
 public:
  // In the `bytes` array of split(): a one-byte part is its byte (< kCharBase); a whole
  // character is kCharBase + its index here.
  static constexpr uint16_t kCharBase = 0x100;

  // For a tiktoken core (pairs are concatenations, ranks are ids); needs its whole-piece table.
  // Built on `pool` (null: this thread); the result is the same whatever its threads.
  static CharParts build(const BpeCore& core, ThreadPool* pool = nullptr);
  bool empty() const { return index_of_.empty(); }

  // The starting parts of p[0, n): ids[k], and bytes[k] = the byte of a one-byte part or
  // kCharBase + the character's index. Returns the count (<= n). byte_id: the token of each byte.
  size_t split(const uint8_t* p, size_t n, const uint32_t* byte_id, uint32_t* ids, uint16_t* bytes) const;
  // False when the whole characters `left` (a bytes[] value >= kCharBase) and `right_id` (the
  // token of a whole character) are surely no pair: no token is their two characters. On cold CJK
  // text most neighbouring characters form no token, and each such lookup was a cache miss into
  // the pair table; these filters are 8 bytes a character.
  bool may_pair(uint16_t left, uint32_t right_id) const {
    return (chars_[left - kCharBase].partners >> partner_bit(right_id)) & 1;
  }

  // Every table, in one fixed order, for BpeCore::for_each_table (the table file).
  template <typename Self, typename F>
  static void for_each_table(Self& parts, F&& f) {
    f(parts.index_of_);
    f(parts.chars_);
    f(parts.ends_in_lead_);
    f(parts.ends_in_lead2_);
    f(parts.starts_with_cont_);
    f(parts.starts_with_cont2_);
    f(parts.bytes_);
    f(parts.offsets_);
  }

 private:
  // A character that may start whole. Rule (a)'s candidates can only occur when the byte before
  // the character is the last byte of an X (left) or the byte after it the first of a Y (right):
  // those bytes, as bits (byte & 63) of all its candidates, so that most characters need no
  // candidate compared (perf: the checks were 11% of a CJK encode without them).
  struct Char {
    uint32_t id;      // t_c
    uint32_t unused;  // what would be padding, named so that every byte is defined (the table file)
    uint64_t left_bits, right_bits;
    uint64_t partners;  // bit partner_bit(d) for every character token d with a token t_c + d
  };
  static unsigned partner_bit(uint32_t id) { return static_cast<unsigned>((id * 0x9E3779B97F4A7C15ull) >> 58); }
  struct Span {
    uint32_t begin = 0, count = 0;  // candidates_[begin, begin + count)
  };
  // True when no candidate token crosses an edge of the character at p[i, i + len) (rule (a)).
  bool sealed(const Char& c, const uint8_t* p, size_t n, size_t i, size_t len) const;
  // True when candidate k's bytes are p[start, start + its length), inside [0, n).
  bool occurs(const uint8_t* p, size_t n, size_t start, uint32_t k) const;

  std::vector<uint16_t> index_of_;  // by code point below 0x10000: 1 + its index in chars_, or 0 (bytes)
  static constexpr size_t kMaxChars = 0xFFFF - kCharBase;
  std::vector<Char> chars_;
  // Tokens X + q by q: a lead byte (64, by b0 & 0x3F), or a 3-byte lead and one continuation
  // byte (1024, by (b0 & 0xF) << 6 | b1 & 0x3F); tokens s + Y by s: one continuation byte (64) or
  // two (4096).
  std::vector<Span> ends_in_lead_, ends_in_lead2_, starts_with_cont_, starts_with_cont2_;
  // The candidates' bytes, side by side: candidate k is bytes_[offsets_[k], offsets_[k + 1]).
  std::string bytes_;
  std::vector<uint32_t> offsets_;
};

}  // namespace quill
