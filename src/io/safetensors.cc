#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "base/error.h"
#include "base/sha256_stream.h"
#include "io/parallel_pwrite.h"

namespace quill {

namespace {

// The reference implementation refuses headers above 100 MB; so do we (a corrupt length field
// must not make us parse gigabytes as JSON).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// Bytes of numel elements of `bits` bits, or nullopt when that is not a whole number of bytes or
// overflows.
std::optional<size_t> tensor_bytes(const Shape& shape, int bits) {
  unsigned __int128 total = static_cast<unsigned>(bits);
  for (int64_t d : shape) {
    if (d < 0) return std::nullopt;
    total *= static_cast<uint64_t>(d);
    if (total > (static_cast<unsigned __int128>(1) << 70)) return std::nullopt;
  }
  if (total % 8) return std::nullopt;
  total /= 8;
  if (total > static_cast<unsigned __int128>(SIZE_MAX)) return std::nullopt;
  return static_cast<size_t>(total);
}

}  // namespace

std::optional<int> safetensors_dtype_bits(const std::string& dtype) {
  static const std::map<std::string, int> bits = {
      {"BOOL", 8},  {"U8", 8},     {"I8", 8},       {"F8_E5M2", 8}, {"F8_E4M3", 8}, {"F8_E8M0", 8},
      {"I16", 16},  {"U16", 16},   {"F16", 16},     {"BF16", 16},   {"I32", 32},    {"U32", 32},
      {"F32", 32},  {"I64", 64},   {"U64", 64},     {"F64", 64},    {"C64", 64},    {"F4", 4},
      {"F6_E2M3", 6}, {"F6_E3M2", 6}};
  auto it = bits.find(dtype);
  if (it == bits.end()) return std::nullopt;
  return it->second;
}

// ---------------------------------------------------------------------------------------------
// Reading

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  SafetensorsFile f;
  f.path_ = path;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  QUILL_CHECK(fd >= 0, "{}: cannot open ({})", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    QUILL_FAIL("{}: cannot stat ({})", path, std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    QUILL_FAIL("{}: not a regular file", path);
  }
  size_t size = static_cast<size_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    QUILL_FAIL("{}: truncated safetensors file ({} bytes, the header length alone takes 8)", path, size);
  }
  void* base = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  int map_err = errno;
  ::close(fd);
  QUILL_CHECK(base != MAP_FAILED, "{}: mmap of {} bytes failed ({})", path, size, std::strerror(map_err));
  f.mapping_ = std::make_shared<Storage>(base, size, Device::CPU, [base, size] { ::munmap(base, size); });

  const auto* bytes = static_cast<const unsigned char*>(base);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];
  QUILL_CHECK(header_len <= size - 8, "{}: header length {} exceeds the {} bytes after the length field (truncated file?)",
              path, header_len, size - 8);
  QUILL_CHECK(header_len <= kMaxHeaderBytes, "{}: header length {} exceeds the 100 MB limit", path, header_len);
  QUILL_CHECK(header_len >= 2 && bytes[8] == '{', "{}: header does not start with a JSON object", path);
  f.data_offset_ = 8 + static_cast<size_t>(header_len);
  f.data_bytes_ = size - f.data_offset_;

  nlohmann::json header;
  try {
    header = nlohmann::json::parse(std::string_view(reinterpret_cast<const char*>(bytes + 8), header_len));
  } catch (const nlohmann::json::exception& e) {
    QUILL_FAIL("{}: header is not valid JSON ({})", path, e.what());
  }
  QUILL_CHECK(header.is_object(), "{}: header is not a JSON object", path);

  std::vector<SafetensorsEntry> entries;
  for (auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      QUILL_CHECK(value.is_object(), "{}: __metadata__ is not an object", path);
      for (auto& [key, v] : value.items()) {
        QUILL_CHECK(v.is_string(), "{}: __metadata__ value of '{}' is not a string", path, key);
        f.metadata_[key] = v.get<std::string>();
      }
      continue;
    }
    QUILL_CHECK(value.is_object(), "{}: tensor '{}': header entry is not an object", path, name);
    SafetensorsEntry e;
    e.name = name;
    auto dt = value.find("dtype");
    QUILL_CHECK(dt != value.end() && dt->is_string(), "{}: tensor '{}': missing or non-string dtype", path, name);
    e.dtype_str = dt->get<std::string>();
    std::optional<int> bits = safetensors_dtype_bits(e.dtype_str);
    QUILL_CHECK(bits.has_value(), "{}: tensor '{}': unknown dtype '{}'", path, name, e.dtype_str);
    try {
      e.dtype = dtype_from_name(e.dtype_str);
    } catch (const Error&) {
      e.dtype = std::nullopt;  // a valid safetensors dtype quill does not compute in (F8, U16, ...)
    }
    auto sh = value.find("shape");
    QUILL_CHECK(sh != value.end() && sh->is_array(), "{}: tensor '{}': missing or non-array shape", path, name);
    for (auto& d : *sh) {
      QUILL_CHECK(d.is_number_unsigned(), "{}: tensor '{}': shape {} has a dimension that is not a non-negative integer",
                  path, name, sh->dump());
      QUILL_CHECK(d.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX), "{}: tensor '{}': dimension too large", path, name);
      e.shape.push_back(static_cast<int64_t>(d.get<uint64_t>()));
    }
    auto off = value.find("data_offsets");
    QUILL_CHECK(off != value.end() && off->is_array() && off->size() == 2 && (*off)[0].is_number_unsigned() &&
                    (*off)[1].is_number_unsigned(),
                "{}: tensor '{}': data_offsets must be two non-negative integers", path, name);
    uint64_t b = (*off)[0].get<uint64_t>(), en = (*off)[1].get<uint64_t>();
    QUILL_CHECK(b <= en, "{}: tensor '{}': data_offsets [{}, {}) begin after end", path, name, b, en);
    QUILL_CHECK(en <= f.data_bytes_, "{}: tensor '{}': data_offsets [{}, {}) out of range of the {}-byte data block", path,
                name, b, en, f.data_bytes_);
    e.begin = static_cast<size_t>(b);
    e.end = static_cast<size_t>(en);
    std::optional<size_t> expected = tensor_bytes(e.shape, *bits);
    QUILL_CHECK(expected.has_value(), "{}: tensor '{}': {}{} is not a whole number of bytes (or overflows)", path, name,
                e.dtype_str, shape_str(e.shape));
    QUILL_CHECK(*expected == e.nbytes(), "{}: tensor '{}': {}{} needs {} bytes but data_offsets [{}, {}) hold {}", path,
                name, e.dtype_str, shape_str(e.shape), *expected, b, en, e.nbytes());
    entries.push_back(std::move(e));
  }

  std::sort(entries.begin(), entries.end(), [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  size_t covered = 0;
  const SafetensorsEntry* last = nullptr;
  for (const SafetensorsEntry& e : entries) {
    QUILL_CHECK(e.begin >= covered, "{}: tensor '{}': data_offsets [{}, {}) overlap tensor '{}' [{}, {})", path, e.name,
                e.begin, e.end, last->name, last->begin, last->end);
    if (e.end > covered || !last) {
      covered = std::max(covered, e.end);
      last = &e;
    }
  }
  for (SafetensorsEntry& e : entries) {
    f.names_.push_back(e.name);
    f.entries_.emplace(e.name, std::move(e));
  }
  return f;
}

const SafetensorsEntry& SafetensorsFile::entry(const std::string& name) const {
  auto it = entries_.find(name);
  QUILL_CHECK(it != entries_.end(), "{}: tensor {} missing", path_, name);
  return it->second;
}

Tensor SafetensorsFile::tensor(const std::string& name) const {
  const SafetensorsEntry& e = entry(name);
  QUILL_CHECK(e.dtype.has_value(), "{}: tensor '{}': dtype {} is not supported by quill", path_, name, e.dtype_str);
  return Tensor::wrap(mapping_, data_offset_ + e.begin, e.shape, *e.dtype);
}

Tensor SafetensorsFile::raw(const std::string& name) const {
  const SafetensorsEntry& e = entry(name);
  return Tensor::wrap(mapping_, data_offset_ + e.begin, {static_cast<int64_t>(e.nbytes())}, DType::U8);
}

// ---------------------------------------------------------------------------------------------
// Writing

SafetensorsItem SafetensorsItem::from_tensor(std::string name, Tensor tensor) {
  QUILL_CHECK(tensor.defined(), "safetensors write: tensor '{}' is undefined", name);
  QUILL_CHECK(tensor.device() == Device::CPU, "safetensors write: tensor '{}' is {}, not a CPU tensor", name,
              tensor.describe());
  SafetensorsItem item;
  item.name = std::move(name);
  item.dtype = dtype_name(tensor.dtype());
  item.shape = tensor.shape();
  item.nbytes = tensor.nbytes();
  item.bytes = [tensor] { return tensor; };
  return item;
}

SafetensorsItem SafetensorsItem::from_file(std::string name, const SafetensorsFile& file, const std::string& source_name) {
  const SafetensorsEntry& e = file.entry(source_name);
  SafetensorsItem item;
  item.name = std::move(name);
  item.dtype = e.dtype_str;
  item.shape = e.shape;
  item.nbytes = e.nbytes();
  Tensor raw = file.raw(source_name);
  item.bytes = [raw] { return raw; };
  return item;
}

std::string safetensors_header(const std::vector<SafetensorsItem>& items,
                               const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    header["__metadata__"] = std::move(m);
  }
  std::set<std::string> seen;
  size_t offset = 0;
  for (const SafetensorsItem& item : items) {
    QUILL_CHECK(item.name != "__metadata__", "safetensors write: '__metadata__' is not a tensor name");
    QUILL_CHECK(seen.insert(item.name).second, "safetensors write: tensor '{}' appears twice", item.name);
    std::optional<int> bits = safetensors_dtype_bits(item.dtype);
    QUILL_CHECK(bits.has_value(), "safetensors write: tensor '{}': unknown dtype '{}'", item.name, item.dtype);
    std::optional<size_t> expected = tensor_bytes(item.shape, *bits);
    QUILL_CHECK(expected.has_value() && *expected == item.nbytes, "safetensors write: tensor '{}': {}{} does not take {} bytes",
                item.name, item.dtype, shape_str(item.shape), item.nbytes);
    nlohmann::ordered_json e = nlohmann::ordered_json::object();
    e["dtype"] = item.dtype;
    e["shape"] = item.shape;
    e["data_offsets"] = {offset, offset + item.nbytes};
    header[item.name] = std::move(e);
    offset += item.nbytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

void write_safetensors_unrenamed(const std::string& tmp_path, const std::string& label,
                                 const std::vector<SafetensorsItem>& items,
                                 const std::map<std::string, std::string>& metadata, int threads,
                                 std::string* sha256) {
  std::string header;
  try {
    header = safetensors_header(items, metadata);
  } catch (const Error& e) {
    QUILL_FAIL("{}: {}", label, e.what());
  }
  int fd = ::open(tmp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  QUILL_CHECK(fd >= 0, "{}: cannot create ({})", tmp_path, std::strerror(errno));
  try {
    {
      // Tensors are made one after another (a producer may convert) and written by several threads.
      ParallelFileWriter writer(fd, tmp_path, threads);
      // The hash's jobs keep their bytes alive as the writer's do; both read them, neither changes them.
      std::optional<BackgroundSha256> hash;
      if (sha256) hash.emplace();
      auto head = std::make_shared<std::string>(8, '\0');
      const uint64_t n = header.size();
      for (int i = 0; i < 8; ++i) (*head)[static_cast<size_t>(i)] = static_cast<char>(n >> (8 * i));
      *head += header;
      writer.write(0, head->data(), head->size(), head);
      if (hash) hash->push([head](Sha256& sha) { sha.update(head->data(), head->size()); });
      uint64_t offset = head->size();
      for (const SafetensorsItem& item : items) {
        Tensor t = item.bytes ? item.bytes() : Tensor();
        QUILL_CHECK(t.defined() && t.device() == Device::CPU, "{}: tensor '{}': no CPU bytes to write", label, item.name);
        QUILL_CHECK(t.nbytes() == item.nbytes, "{}: tensor '{}': producer gave {} bytes, header says {}", label, item.name,
                    t.nbytes(), item.nbytes);
        auto keep = std::make_shared<Tensor>(t);
        writer.write(offset, keep->data(), keep->nbytes(), keep);
        if (hash) hash->push([keep](Sha256& sha) { sha.update(keep->data(), keep->nbytes()); });
        offset += item.nbytes;
      }
      writer.finish();
      if (hash) *sha256 = hash->hex();
    }
    QUILL_CHECK(::fsync(fd) == 0, "{}: fsync failed ({})", tmp_path, std::strerror(errno));
    int rc = ::close(fd);
    fd = -1;
    QUILL_CHECK(rc == 0, "{}: close failed ({})", tmp_path, std::strerror(errno));
  } catch (...) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp_path.c_str());
    throw;
  }
}

void write_safetensors(const std::string& path, const std::vector<SafetensorsItem>& items,
                       const std::map<std::string, std::string>& metadata, int threads, std::string* sha256) {
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  write_safetensors_unrenamed(tmp, path, items, metadata, threads, sha256);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    QUILL_FAIL("{}: rename failed ({})", path, std::strerror(err));
  }
}

void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata, int threads, std::string* sha256) {
  std::vector<SafetensorsItem> items;
  items.reserve(tensors.size());
  for (const auto& [name, t] : tensors) items.push_back(SafetensorsItem::from_tensor(name, t));
  write_safetensors(path, items, metadata, threads, sha256);
}

}  // namespace quill
