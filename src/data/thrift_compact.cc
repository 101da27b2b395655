#include "data/thrift_compact.h"

#include "base/error.h"

namespace quill {

namespace {

// How deep skip() follows nested structs, lists and maps before calling the bytes corrupt (the
// Parquet structures nest about six deep; the limit keeps a malicious footer from exhausting the
// stack).
constexpr int kMaxSkipDepth = 64;

const char* type_name(ThriftType t) {
  switch (t) {
    case ThriftType::kStop: return "stop";
    case ThriftType::kTrue:
    case ThriftType::kFalse: return "bool";
    case ThriftType::kI8: return "i8";
    case ThriftType::kI16: return "i16";
    case ThriftType::kI32: return "i32";
    case ThriftType::kI64: return "i64";
    case ThriftType::kDouble: return "double";
    case ThriftType::kBinary: return "binary";
    case ThriftType::kList: return "list";
    case ThriftType::kSet: return "set";
    case ThriftType::kMap: return "map";
    case ThriftType::kStruct: return "struct";
    case ThriftType::kUuid: return "uuid";
  }
  return "?";
}

bool is_integer(ThriftType t) { return t == ThriftType::kI8 || t == ThriftType::kI16 || t == ThriftType::kI32; }

}  // namespace

ThriftReader::ThriftReader(std::string_view bytes, std::string what) : bytes_(bytes), what_(std::move(what)) {}

void ThriftReader::fail(std::string_view problem) const {
  QUILL_FAIL("{}: corrupt Thrift ({} at byte {} of {})", what_, problem, pos_, bytes_.size());
}

void ThriftReader::need(size_t n) const {
  if (n > bytes_.size() - pos_) fail(fmt::format("{} more bytes needed, {} left", n, bytes_.size() - pos_));
}

uint8_t ThriftReader::read_byte() {
  need(1);
  return static_cast<uint8_t>(bytes_[pos_++]);
}

uint64_t ThriftReader::read_varint() {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    uint8_t b = read_byte();
    if (shift == 63 && (b & 0x7E)) fail("a varint longer than 64 bits");
    v |= static_cast<uint64_t>(b & 0x7F) << shift;
    if (!(b & 0x80)) return v;
  }
  fail("a varint longer than 10 bytes");
}

int32_t ThriftReader::read_i32() {
  int64_t v = zigzag_decode(read_varint());
  if (v < INT32_MIN || v > INT32_MAX) fail(fmt::format("i32 value {} out of range", v));
  return static_cast<int32_t>(v);
}

int64_t ThriftReader::read_i64() { return zigzag_decode(read_varint()); }

std::string_view ThriftReader::read_binary() {
  uint64_t n = read_varint();
  if (n > bytes_.size() - pos_) fail(fmt::format("a binary of {} bytes, {} left", n, bytes_.size() - pos_));
  std::string_view v = bytes_.substr(pos_, n);
  pos_ += n;
  return v;
}

bool ThriftReader::read_bool(const Field& f) const { return f.type == ThriftType::kTrue; }

ThriftReader::ListHeader ThriftReader::read_list_header() {
  uint8_t h = read_byte();
  ListHeader l;
  l.element = static_cast<ThriftType>(h & 0x0F);
  l.size = h >> 4;
  if (l.size == 15) {
    uint64_t n = read_varint();
    if (n > static_cast<uint64_t>(INT32_MAX)) fail(fmt::format("a list of {} elements", n));
    l.size = static_cast<int64_t>(n);
  }
  // Every element takes at least one byte, except in a list of empty structs... which still
  // takes its stop byte: so a list longer than the bytes left is corrupt, and caught before any
  // caller reserves memory for it.
  if (static_cast<uint64_t>(l.size) > bytes_.size() - pos_) {
    fail(fmt::format("a list of {} elements with {} bytes left", l.size, bytes_.size() - pos_));
  }
  return l;
}

void ThriftReader::begin_struct() {
  if (depth_ == kMaxDepth) fail("structs nested too deep");
  last_id_[depth_++] = 0;
}

ThriftReader::Field ThriftReader::next_field() {
  if (depth_ == 0) fail("a field outside a struct (reader misuse)");
  uint8_t h = read_byte();
  Field f;
  f.type = static_cast<ThriftType>(h & 0x0F);
  if (f.type == ThriftType::kStop) {
    if (h != 0) fail("a stop field with a nonzero id delta");
    --depth_;
    return f;
  }
  if (static_cast<uint8_t>(f.type) > static_cast<uint8_t>(ThriftType::kUuid)) {
    fail(fmt::format("unknown field type {}", static_cast<int>(f.type)));
  }
  int delta = h >> 4;
  if (delta != 0) {
    f.id = static_cast<int16_t>(last_id_[depth_ - 1] + delta);
  } else {
    int64_t id = zigzag_decode(read_varint());
    if (id < INT16_MIN || id > INT16_MAX) fail(fmt::format("field id {} out of range", id));
    f.id = static_cast<int16_t>(id);
  }
  last_id_[depth_ - 1] = f.id;
  return f;
}

void ThriftReader::skip(ThriftType type) { skip_depth(type, 0); }

void ThriftReader::skip_depth(ThriftType type, int depth) {
  if (depth > kMaxSkipDepth) fail("values nested too deep");
  switch (type) {
    case ThriftType::kTrue:
    case ThriftType::kFalse: return;  // a field's boolean is in its header
    case ThriftType::kI8: read_byte(); return;
    case ThriftType::kI16:
    case ThriftType::kI32:
    case ThriftType::kI64: read_varint(); return;
    case ThriftType::kDouble: need(8); pos_ += 8; return;
    case ThriftType::kUuid: need(16); pos_ += 16; return;
    case ThriftType::kBinary: read_binary(); return;
    case ThriftType::kList:
    case ThriftType::kSet: {
      ListHeader l = read_list_header();
      for (int64_t i = 0; i < l.size; ++i) {
        if (l.element == ThriftType::kTrue || l.element == ThriftType::kFalse) {
          read_byte();  // a boolean element is one byte
        } else {
          skip_depth(l.element, depth + 1);
        }
      }
      return;
    }
    case ThriftType::kMap: {
      uint64_t n = read_varint();
      if (n == 0) return;
      if (n > bytes_.size() - pos_) fail(fmt::format("a map of {} entries with {} bytes left", n, bytes_.size() - pos_));
      uint8_t kv = read_byte();
      ThriftType k = static_cast<ThriftType>(kv >> 4), v = static_cast<ThriftType>(kv & 0x0F);
      for (uint64_t i = 0; i < n; ++i) {
        for (ThriftType t : {k, v}) {
          if (t == ThriftType::kTrue || t == ThriftType::kFalse) read_byte();
          else skip_depth(t, depth + 1);
        }
      }
      return;
    }
    case ThriftType::kStruct: {
      for (;;) {
        uint8_t h = read_byte();
        ThriftType t = static_cast<ThriftType>(h & 0x0F);
        if (t == ThriftType::kStop) return;
        if ((h >> 4) == 0) read_varint();  // the long form's field id
        skip_depth(t, depth + 1);
      }
    }
    case ThriftType::kStop: break;
  }
  fail(fmt::format("cannot skip a value of type {}", static_cast<int>(type)));
}

int32_t ThriftReader::read_i32_field(const Field& f, const char* name) {
  if (!is_integer(f.type)) fail(fmt::format("field {} is {}, expected i32", name, type_name(f.type)));
  if (f.type == ThriftType::kI8) return static_cast<int8_t>(read_byte());
  return read_i32();
}

int64_t ThriftReader::read_i64_field(const Field& f, const char* name) {
  if (!is_integer(f.type) && f.type != ThriftType::kI64) {
    fail(fmt::format("field {} is {}, expected i64", name, type_name(f.type)));
  }
  if (f.type == ThriftType::kI8) return static_cast<int8_t>(read_byte());
  return read_i64();
}

std::string_view ThriftReader::read_binary_field(const Field& f, const char* name) {
  if (f.type != ThriftType::kBinary) fail(fmt::format("field {} is {}, expected binary", name, type_name(f.type)));
  return read_binary();
}

bool ThriftReader::read_bool_field(const Field& f, const char* name) const {
  if (f.type != ThriftType::kTrue && f.type != ThriftType::kFalse) {
    fail(fmt::format("field {} is {}, expected bool", name, type_name(f.type)));
  }
  return read_bool(f);
}

int64_t ThriftReader::read_list_field(const Field& f, ThriftType element, const char* name) {
  if (f.type != ThriftType::kList) fail(fmt::format("field {} is {}, expected a list", name, type_name(f.type)));
  ListHeader l = read_list_header();
  bool ok = l.element == element || (l.size == 0) ||
            (is_integer(element) && is_integer(l.element));  // enums are i32; accept narrower ints
  if (!ok) fail(fmt::format("field {} is a list of {}, expected {}", name, type_name(l.element), type_name(element)));
  return l.size;
}

}  // namespace quill
