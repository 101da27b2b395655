#include "data/rows.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <utility>

#include "base/error.h"
#include "base/file_util.h"
#include "data/build_timing.h"
#include "base/sha256_stream.h"

namespace quill {

// Token rows are written and mapped as native uint32: the format is little-endian.
static_assert(std::endian::native == std::endian::little, "the rows format assumes a little-endian host");

namespace {

std::string join(const std::string& dir, const char* file) { return (std::filesystem::path(dir) / file).string(); }

void put_u32(unsigned char* p, uint32_t v) { std::memcpy(p, &v, 4); }
void put_u64(unsigned char* p, uint64_t v) { std::memcpy(p, &v, 8); }
uint32_t get_u32(const unsigned char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
uint64_t get_u64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

void write_all(std::FILE* f, const void* data, size_t n, const std::string& path) {
  if (n == 0) return;
  QUILL_CHECK(std::fwrite(data, 1, n, f) == n, "{}: write failed ({})", path, std::strerror(errno));
}

const char* const kComputedFields[] = {"format",        "format_version", "rows",
                                       "row_tokens",    "padding_tokens", "rows_sha256",
                                       "supervised_targets", "supervised_token_ratio", "max_token_id"};

}  // namespace

int64_t count_supervised_targets(std::span<const uint8_t> mask) {
  int64_t n = 0;
  for (size_t t = 1; t < mask.size(); ++t) n += mask[t] != 0;
  return n;
}

// ---------------------------------------------------------------------------------------------
// RowsWriter

struct RowsWriter::Impl {
  std::string tokens_tmp, mask_tmp;
  std::FILE* tokens = nullptr;
  std::FILE* mask = nullptr;
  Sha256 sha;

  void close_files() {
    if (tokens) std::fclose(tokens);
    if (mask) std::fclose(mask);
    tokens = mask = nullptr;
  }
};

RowsWriter::RowsWriter(const std::string& out_dir, int64_t row_tokens)
    : dir_(out_dir), row_tokens_(row_tokens), impl_(new Impl) {
  std::unique_ptr<Impl> guard(impl_);
  QUILL_CHECK(row_tokens > 0 && row_tokens <= std::numeric_limits<uint32_t>::max(),
              "{}: row_tokens must be in [1, 2^32), got {}", out_dir, row_tokens);
  make_dirs(out_dir);
  std::string suffix = ".tmp." + std::to_string(::getpid());
  impl_->tokens_tmp = join(out_dir, kRowsFile) + suffix;
  impl_->mask_tmp = join(out_dir, kRowsFile) + ".mask" + suffix;
  impl_->tokens = std::fopen(impl_->tokens_tmp.c_str(), "w+b");
  QUILL_CHECK(impl_->tokens, "{}: cannot create ({})", impl_->tokens_tmp, std::strerror(errno));
  impl_->mask = std::fopen(impl_->mask_tmp.c_str(), "w+b");
  if (!impl_->mask) {
    int err = errno;
    impl_->close_files();
    std::remove(impl_->tokens_tmp.c_str());
    QUILL_FAIL("{}: cannot create ({})", impl_->mask_tmp, std::strerror(err));
  }
  unsigned char header[kRowsHeaderBytes] = {};  // rewritten by finish()
  write_all(impl_->tokens, header, sizeof header, impl_->tokens_tmp);
  guard.release();
}

RowsWriter::~RowsWriter() {
  impl_->close_files();
  if (!finished_) {
    std::remove(impl_->tokens_tmp.c_str());
    std::remove(impl_->mask_tmp.c_str());
  }
  delete impl_;
}

void RowsWriter::append(std::span<const uint32_t> tokens, std::span<const uint8_t> mask) {
  QUILL_CHECK(!finished_, "{}: append after finish", dir_);
  QUILL_CHECK(static_cast<int64_t>(tokens.size()) == row_tokens_ && static_cast<int64_t>(mask.size()) == row_tokens_,
              "{}: row {} has {} tokens and {} mask bytes, expected {} of each", dir_, rows_, tokens.size(),
              mask.size(), row_tokens_);
  for (size_t t = 0; t < mask.size(); ++t) {
    QUILL_CHECK(mask[t] <= 1, "{}: row {} mask[{}] is {}, expected 0 or 1", dir_, rows_, t, mask[t]);
  }
  {
    WorkTimer t(timing_, BuildTiming::kWrite);
    write_all(impl_->tokens, tokens.data(), tokens.size_bytes(), impl_->tokens_tmp);
    write_all(impl_->mask, mask.data(), mask.size_bytes(), impl_->mask_tmp);
  }
  {
    WorkTimer t(timing_, BuildTiming::kHash);
    impl_->sha.update(tokens.data(), tokens.size_bytes());
    impl_->sha.update(mask.data(), mask.size_bytes());
  }
  supervised_ += count_supervised_targets(mask);
  max_token_id_ = std::max<int64_t>(max_token_id_, *std::max_element(tokens.begin(), tokens.end()));
  ++rows_;
}

void check_manifest_extras(const std::string& dir, const nlohmann::json& extras) {
  QUILL_CHECK(extras.is_object(), "{}: manifest extras must be a JSON object", dir);
  for (const char* key : kComputedFields) {
    QUILL_CHECK(!extras.contains(key), "{}: manifest field {} is computed by the writer", dir, key);
  }
}

std::array<unsigned char, kRowsHeaderBytes> rows_header(int64_t row_tokens, int64_t rows) {
  std::array<unsigned char, kRowsHeaderBytes> header{};
  std::memcpy(header.data(), kRowsMagic, 8);
  put_u32(header.data() + 8, kRowsVersion);
  put_u32(header.data() + 12, static_cast<uint32_t>(row_tokens));
  put_u64(header.data() + 16, static_cast<uint64_t>(rows));
  return header;
}

nlohmann::json rows_manifest(const std::string& dir, const nlohmann::json& extras, const RowsSummary& s) {
  check_manifest_extras(dir, extras);
  nlohmann::json manifest = extras;
  manifest["format"] = "quill-rows";
  manifest["format_version"] = kRowsVersion;
  manifest["rows"] = s.rows;
  manifest["row_tokens"] = s.row_tokens;
  manifest["padding_tokens"] = 0;
  manifest["rows_sha256"] = s.rows_sha256;
  manifest["supervised_targets"] = s.supervised_targets;
  manifest["supervised_token_ratio"] =
      s.rows == 0 ? 0.0 : static_cast<double>(s.supervised_targets) / static_cast<double>(s.rows * s.row_tokens);
  manifest["max_token_id"] = s.max_token_id;
  return manifest;
}

void install_rows(const std::string& dir, const std::string& rows_tmp, const nlohmann::json& manifest) {
  // A stale manifest must never describe the new rows.bin: remove it first, then rename the rows
  // into place, then write the new manifest. A crash in between leaves no manifest (an error on
  // open), never a wrong one.
  std::string rows_path = join(dir, kRowsFile), manifest_path = join(dir, kManifestFile);
  std::error_code ec;
  std::filesystem::remove(manifest_path, ec);
  QUILL_CHECK(!ec, "{}: cannot remove the old manifest ({})", manifest_path, ec.message());
  QUILL_CHECK(std::rename(rows_tmp.c_str(), rows_path.c_str()) == 0, "{}: rename failed ({})", rows_path,
              std::strerror(errno));
  write_file_atomic(manifest_path, manifest.dump(2) + "\n");
}

nlohmann::json RowsWriter::finish(const nlohmann::json& extras) {
  QUILL_CHECK(!finished_, "{}: finish called twice", dir_);
  check_manifest_extras(dir_, extras);
  Impl& im = *impl_;
  WorkTimer write_timer(timing_, BuildTiming::kWrite);
  // Mask section after the token section.
  QUILL_CHECK(std::fflush(im.mask) == 0 && std::fseek(im.mask, 0, SEEK_SET) == 0, "{}: cannot reread ({})",
              im.mask_tmp, std::strerror(errno));
  std::vector<char> buf(1 << 20);
  for (size_t n; (n = std::fread(buf.data(), 1, buf.size(), im.mask)) > 0;) write_all(im.tokens, buf.data(), n, im.tokens_tmp);
  QUILL_CHECK(!std::ferror(im.mask), "{}: read failed", im.mask_tmp);

  std::array<unsigned char, kRowsHeaderBytes> header = rows_header(row_tokens_, rows_);
  QUILL_CHECK(std::fseek(im.tokens, 0, SEEK_SET) == 0, "{}: seek failed", im.tokens_tmp);
  write_all(im.tokens, header.data(), header.size(), im.tokens_tmp);
  QUILL_CHECK(std::fflush(im.tokens) == 0, "{}: flush failed ({})", im.tokens_tmp, std::strerror(errno));
  write_timer.stop();
  {
    WorkTimer t(timing_, BuildTiming::kSync);
    QUILL_CHECK(::fsync(::fileno(im.tokens)) == 0, "{}: flush failed ({})", im.tokens_tmp, std::strerror(errno));
  }
  im.close_files();

  nlohmann::json manifest = rows_manifest(dir_, extras, {rows_, row_tokens_, supervised_, max_token_id_, im.sha.hex()});
  install_rows(dir_, im.tokens_tmp, manifest);
  std::remove(im.mask_tmp.c_str());
  finished_ = true;
  return manifest;
}

// ---------------------------------------------------------------------------------------------
// RowsReader

RowsReader RowsReader::open(const std::string& dir, bool verify_sha256) {
  RowsReader r;
  r.dir_ = dir;
  std::string manifest_path = join(dir, kManifestFile), rows_path = join(dir, kRowsFile);
  QUILL_CHECK(path_exists(manifest_path), "{}: missing (not a rows directory, or an unfinished build)", manifest_path);
  try {
    r.manifest_ = nlohmann::json::parse(read_file(manifest_path));
  } catch (const nlohmann::json::parse_error& e) {
    QUILL_FAIL("{}: malformed JSON ({})", manifest_path, e.what());
  }
  QUILL_CHECK(r.manifest_.is_object(), "{}: must be a JSON object", manifest_path);

  int fd = ::open(rows_path.c_str(), O_RDONLY);
  QUILL_CHECK(fd >= 0, "{}: cannot open ({})", rows_path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    QUILL_FAIL("{}: cannot stat ({})", rows_path, std::strerror(err));
  }
  uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < static_cast<uint64_t>(kRowsHeaderBytes)) {
    ::close(fd);
    QUILL_FAIL("{}: truncated: {} bytes, shorter than the {}-byte header", rows_path, size, kRowsHeaderBytes);
  }
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  int map_err = errno;
  ::close(fd);
  QUILL_CHECK(map != MAP_FAILED, "{}: mmap failed ({})", rows_path, std::strerror(map_err));
  r.map_ = static_cast<const uint8_t*>(map);
  r.map_bytes_ = size;

  const unsigned char* h = r.map_;
  QUILL_CHECK(std::memcmp(h, kRowsMagic, 8) == 0, "{}: bad magic (not a quill rows file)", rows_path);
  uint32_t version = get_u32(h + 8);
  QUILL_CHECK(version == kRowsVersion, "{}: header version is {}, this build reads version {}", rows_path, version,
              kRowsVersion);
  uint64_t row_tokens = get_u32(h + 12), rows = get_u64(h + 16);
  QUILL_CHECK(row_tokens > 0, "{}: header row_tokens is 0", rows_path);
  for (int i = 24; i < kRowsHeaderBytes; ++i) {
    QUILL_CHECK(h[i] == 0, "{}: header reserved byte {} is not zero", rows_path, i);
  }
  uint64_t max_rows = (std::numeric_limits<uint64_t>::max() - kRowsHeaderBytes) / (5 * row_tokens);
  QUILL_CHECK(rows <= max_rows, "{}: header rows {} is impossibly large", rows_path, rows);
  uint64_t expected = kRowsHeaderBytes + 5 * rows * row_tokens;
  QUILL_CHECK(size == expected, "{}: size is {} bytes, but the header's {} rows of {} tokens need {} bytes{}", rows_path,
              size, rows, row_tokens, expected, size < expected ? " (truncated)" : "");
  r.rows_ = static_cast<int64_t>(rows);
  r.row_tokens_ = static_cast<int64_t>(row_tokens);

  auto check_field = [&](const char* key, int64_t want) {
    auto it = r.manifest_.find(key);
    QUILL_CHECK(it != r.manifest_.end(), "{}: missing field {}", manifest_path, key);
    QUILL_CHECK(it->is_number_integer(), "{}: field {} must be an integer", manifest_path, key);
    QUILL_CHECK(it->get<int64_t>() == want, "{}: field {} is {}, but {} has {}", manifest_path, key,
                it->get<int64_t>(), rows_path, want);
  };
  check_field("rows", r.rows_);
  check_field("row_tokens", r.row_tokens_);
  check_field("padding_tokens", 0);
  QUILL_CHECK(r.manifest_.contains("rows_sha256") && r.manifest_["rows_sha256"].is_string(),
              "{}: missing field rows_sha256", manifest_path);
  if (verify_sha256) r.verify();
  return r;
}

RowsReader::RowsReader(RowsReader&& o) noexcept { *this = std::move(o); }

RowsReader& RowsReader::operator=(RowsReader&& o) noexcept {
  if (this != &o) {
    release();
    dir_ = std::move(o.dir_);
    manifest_ = std::move(o.manifest_);
    map_ = std::exchange(o.map_, nullptr);
    map_bytes_ = std::exchange(o.map_bytes_, 0);
    rows_ = std::exchange(o.rows_, 0);
    row_tokens_ = std::exchange(o.row_tokens_, 0);
  }
  return *this;
}

RowsReader::~RowsReader() { release(); }

void RowsReader::release() {
  if (map_) ::munmap(const_cast<uint8_t*>(map_), map_bytes_);
  map_ = nullptr;
  map_bytes_ = 0;
}

const uint32_t* RowsReader::tokens(int64_t row) const {
  QUILL_CHECK(row >= 0 && row < rows_, "{}: row {} out of range [0, {})", dir_, row, rows_);
  return reinterpret_cast<const uint32_t*>(map_ + kRowsHeaderBytes) + row * row_tokens_;
}

const uint8_t* RowsReader::mask(int64_t row) const {
  QUILL_CHECK(row >= 0 && row < rows_, "{}: row {} out of range [0, {})", dir_, row, rows_);
  return map_ + kRowsHeaderBytes + 4 * rows_ * row_tokens_ + row * row_tokens_;
}

int64_t RowsReader::supervised_targets(int64_t row) const {
  return count_supervised_targets({mask(row), static_cast<size_t>(row_tokens_)});
}

std::string RowsReader::compute_rows_sha256() const {
  Sha256 sha;
  for (int64_t r = 0; r < rows_; ++r) {
    sha.update(tokens(r), 4 * row_tokens_);
    sha.update(mask(r), row_tokens_);
  }
  return sha.hex();
}

void RowsReader::verify() const {
  std::string rows_path = join(dir_, kRowsFile);
  for (int64_t r = 0; r < rows_; ++r) {
    const uint8_t* m = mask(r);
    for (int64_t t = 0; t < row_tokens_; ++t) {
      QUILL_CHECK(m[t] <= 1, "{}: row {} mask[{}] is {}, expected 0 or 1", rows_path, r, t, m[t]);
    }
  }
  std::string got = compute_rows_sha256(), want = manifest_.value("rows_sha256", "");
  QUILL_CHECK(got == want, "{}: rows_sha256 is {}, but {} hashes to {}", join(dir_, kManifestFile), want, rows_path, got);
}

}  // namespace quill
