// The table file of a rank file (bpe_table_file.h says what is checked, and why).
//
// Layout (native byte order, checked by the byte-order field):
//   Header (168 bytes, below), then for each table of BpeCore::for_each_table, in its order:
//   u64 byte count, the bytes, zero padding to a multiple of 8.
// The checksum covers every section's byte count and contents: the hashes of its 256 KiB blocks
// (computed on the threads that copy them) combined in file order, so it is the same whatever
// the thread count; the padding must be zeros.
#include "data/bpe_table_file.h"

#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>

#include "base/error.h"
#include "base/file_util.h"
#include "data/bpe_tables_fingerprint.h"
#include "data/mapped_file.h"

namespace quill {

namespace {

constexpr char kMagic[8] = {'Q', 'B', 'P', 'E', 'T', 'A', 'B', 'S'};
constexpr uint32_t kVersion = 1;
constexpr uint32_t kByteOrder = 0x01020304;
constexpr size_t kBlock = size_t{256} << 10;

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t byte_order;
  char fingerprint[64];   // QUILL_BPE_TABLES_FINGERPRINT
  char ranks_sha256[64];  // hex
  uint64_t ranks_bytes;
  uint64_t sections;
  uint64_t checksum;
};
static_assert(sizeof(Header) == 168 && std::is_trivially_copyable_v<Header>);
static_assert(sizeof(QUILL_BPE_TABLES_FINGERPRINT) == 65, "the fingerprint is a SHA-256 in hex");

// A member added to BpeCore must be added to BpeCore::for_each_table too, or a core read from
// the file would lack it: this size is the class as for_each_table lists it (update both).
static_assert(sizeof(BpeCore) == 1760, "BpeCore changed: update BpeCore::for_each_table, then this size");

template <typename T>
struct IsVector : std::false_type {};
template <typename T, typename A>
struct IsVector<std::vector<T, A>> : std::true_type {};

size_t padded(size_t n) { return (n + 7) / 8 * 8; }

inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

// A 64-bit hash of a block for the checksum: eight independent multiply-rotate lanes over 8-byte
// words (a damaged or torn file, not an adversary, is what it must catch; eight lanes keep the
// multiplier busy, v1's four made it as slow as the copy itself).
uint64_t block_hash(const uint8_t* p, size_t n) {
  constexpr uint64_t kMul = 0x9E3779B97F4A7C15ull;
  constexpr int kLanes = 8;
  uint64_t lane[kLanes];
  for (int k = 0; k < kLanes; ++k) lane[k] = 0x243F6A8885A308D3ull * (2 * k + 1);
  size_t i = 0;
  for (; i + 8 * kLanes <= n; i += 8 * kLanes) {
    for (int k = 0; k < kLanes; ++k) {
      uint64_t w;
      std::memcpy(&w, p + i + 8 * k, 8);
      lane[k] = rotl((lane[k] ^ w) * kMul, 29);
    }
  }
  for (int k = 0; i < n; i += 8, ++k) {
    uint64_t w = 0;
    std::memcpy(&w, p + i, std::min<size_t>(8, n - i));
    lane[k] = rotl((lane[k] ^ w) * kMul, 29);
  }
  uint64_t h = n * kMul;
  for (uint64_t l : lane) h = rotl((h ^ l) * 0xBF58476D1CE4E5B9ull, 31);
  return h ^ (h >> 29);
}

struct Section {
  const uint8_t* bytes;
  size_t size;
};

// The blocks of the sections, in file order: (section, offset in it).
std::vector<std::pair<size_t, size_t>> blocks_of(const std::vector<Section>& sections) {
  std::vector<std::pair<size_t, size_t>> blocks;
  for (size_t s = 0; s < sections.size(); ++s) {
    for (size_t off = 0; off < sections[s].size; off += kBlock) blocks.push_back({s, off});
  }
  return blocks;
}

uint64_t combine(const std::vector<Section>& sections, const std::vector<std::pair<size_t, size_t>>& blocks,
                 const std::vector<uint64_t>& block_hashes) {
  uint64_t h = 0x6A09E667F3BCC908ull;
  auto mix_in = [&](uint64_t v) { h = rotl((h ^ v) * 0x94D049BB133111EBull, 27); };
  for (const Section& s : sections) mix_in(s.size);
  for (size_t b = 0; b < blocks.size(); ++b) mix_in(block_hashes[b] ^ (uint64_t{blocks[b].first} << 48));
  return h;
}

// The sections of a core (for writing): each table's bytes, in for_each_table's order.
std::vector<Section> sections_of(const BpeCore& core) {
  std::vector<Section> out;
  BpeCore::for_each_table(core, [&](const auto& m) {
    using M = std::remove_cvref_t<decltype(m)>;
    if constexpr (std::is_same_v<M, std::string>) {
      out.push_back({reinterpret_cast<const uint8_t*>(m.data()), m.size()});
    } else if constexpr (IsVector<M>::value) {
      // No padding (every byte defined), so that the file, and its checksum, depend only on the values.
      static_assert(std::has_unique_object_representations_v<typename M::value_type>);
      out.push_back({reinterpret_cast<const uint8_t*>(m.data()), m.size() * sizeof(typename M::value_type)});
    } else {
      static_assert(std::has_unique_object_representations_v<M>);
      out.push_back({reinterpret_cast<const uint8_t*>(&m), sizeof(M)});
    }
  });
  return out;
}

bool same_text(const char (&field)[64], std::string_view text) {
  return text.size() == 64 && std::memcmp(field, text.data(), 64) == 0;
}

}  // namespace

TableFilePolicy TableFilePolicy::from_env() {
  TableFilePolicy p;
  const char* v = std::getenv("QUILL_TOKENIZER_CACHE");
  p.enabled = v == nullptr || std::string_view(v) != "0";
  return p;
}

std::string bpe_table_file_path(const std::string& ranks_path) { return ranks_path + ".quill-tables"; }

std::optional<BpeCore> read_bpe_table_file(const std::string& file, const std::function<std::string()>& ranks_sha256,
                                           uint64_t ranks_bytes, ThreadPool& pool) {
  if (!path_exists(file)) return std::nullopt;
  std::optional<MappedFile> map;
  try {
    map.emplace(file);
  } catch (const Error&) {
    return std::nullopt;
  }
  const std::string_view data = map->view();
  if (data.size() < sizeof(Header)) return std::nullopt;
  Header h;
  std::memcpy(&h, data.data(), sizeof(Header));
  if (std::memcmp(h.magic, kMagic, 8) != 0 || h.version != kVersion || h.byte_order != kByteOrder ||
      !same_text(h.fingerprint, QUILL_BPE_TABLES_FINGERPRINT) || h.ranks_bytes != ranks_bytes) {
    return std::nullopt;
  }
  // Each table sized from its section, then all of them copied in blocks on the pool.
  const auto* base = reinterpret_cast<const uint8_t*>(data.data());
  size_t pos = sizeof(Header);
  bool ok = true;
  std::vector<Section> sources;
  std::vector<uint8_t*> targets;
  BpeCore core = BpeCore::unbuilt();
  BpeCore::for_each_table(core, [&](auto& m) {
    using M = std::remove_cvref_t<decltype(m)>;
    if (!ok || data.size() - pos < 8) {
      ok = false;
      return;
    }
    uint64_t n = 0;
    std::memcpy(&n, base + pos, 8);
    pos += 8;
    if (n > data.size() - pos || padded(n) > data.size() - pos) {
      ok = false;
      return;
    }
    uint8_t* target = nullptr;
    if constexpr (std::is_same_v<M, std::string>) {
      m.resize(n);
      target = reinterpret_cast<uint8_t*>(m.data());
    } else if constexpr (IsVector<M>::value) {
      using T = typename M::value_type;
      if (n % sizeof(T) != 0) {
        ok = false;
        return;
      }
      m.resize(n / sizeof(T));  // tables of DefaultInitAllocator are not zero-filled first
      target = reinterpret_cast<uint8_t*>(m.data());
    } else {
      if (n != sizeof(M)) {
        ok = false;
        return;
      }
      target = reinterpret_cast<uint8_t*>(&m);
    }
    sources.push_back({base + pos, n});
    targets.push_back(target);
    for (size_t i = n; i < padded(n); ++i) ok = ok && base[pos + i] == 0;  // so every byte is checked
    pos += padded(n);
  });
  if (!ok || pos != data.size() || sources.size() != h.sections) return std::nullopt;
  const auto blocks = blocks_of(sources);
  std::vector<uint64_t> hashes(blocks.size());
  pool.parallel_for(blocks.size(), [&](size_t b) {
    const auto [s, off] = blocks[b];
    const size_t n = std::min(kBlock, sources[s].size - off);
    std::memcpy(targets[s] + off, sources[s].bytes + off, n);
    hashes[b] = block_hash(targets[s] + off, n);  // of the copy, while it is in cache
  });
  if (combine(sources, blocks, hashes) != h.checksum || !same_text(h.ranks_sha256, ranks_sha256())) return std::nullopt;
  return core;
}

bool write_bpe_table_file(const std::string& file, const BpeCore& core, std::string_view ranks_sha256,
                          uint64_t ranks_bytes) {
  QUILL_CHECK(ranks_sha256.size() == 64, "write_bpe_table_file: expected a SHA-256 in hex, got \"{}\"", ranks_sha256);
  const std::vector<Section> sections = sections_of(core);
  const auto blocks = blocks_of(sections);
  std::vector<uint64_t> hashes(blocks.size());
  for (size_t b = 0; b < blocks.size(); ++b) {
    const auto [s, off] = blocks[b];
    hashes[b] = block_hash(sections[s].bytes + off, std::min(kBlock, sections[s].size - off));
  }
  Header h{};
  std::memcpy(h.magic, kMagic, 8);
  h.version = kVersion;
  h.byte_order = kByteOrder;
  std::memcpy(h.fingerprint, QUILL_BPE_TABLES_FINGERPRINT, 64);
  std::memcpy(h.ranks_sha256, ranks_sha256.data(), 64);
  h.ranks_bytes = ranks_bytes;
  h.sections = sections.size();
  h.checksum = combine(sections, blocks, hashes);
  size_t total = sizeof(Header);
  for (const Section& s : sections) total += 8 + padded(s.size);
  std::string out;
  out.reserve(total);
  out.append(reinterpret_cast<const char*>(&h), sizeof(Header));
  for (const Section& s : sections) {
    const uint64_t n = s.size;
    out.append(reinterpret_cast<const char*>(&n), 8);
    out.append(reinterpret_cast<const char*>(s.bytes), s.size);
    out.append(padded(s.size) - s.size, '\0');
  }
  try {
    write_file_atomic(file, out, /*flush=*/false);  // a torn file fails the checks above; the flush cost ~0.1 s
  } catch (const Error&) {
    return false;  // a read-only folder, a full disk: the next load builds again
  }
  return true;
}

}  // namespace quill
