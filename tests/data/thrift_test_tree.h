// Test-only Thrift compact protocol as a tree of values, decoded and encoded independently of
// src/data/thrift_compact.* (Apache Thrift's doc/specs/thrift-compact-protocol.md): the Parquet
// tests edit pyarrow's footers and page headers with it (a codec, an encoding, a column's name)
// and write small Parquet files of their own (parquet_test_writer.h).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace quill::test {

struct ThriftNode {
  enum Kind { kBool, kI8, kI16, kI32, kI64, kBinary, kList, kStruct };
  Kind kind = kStruct;
  int64_t i = 0;       // integers; bools as 0/1
  std::string bin;     // binary
  Kind elem = kI32;    // list elements
  std::vector<ThriftNode> items;                        // list
  std::vector<std::pair<int16_t, ThriftNode>> fields;  // struct, in order

  static ThriftNode integer(Kind k, int64_t v) { ThriftNode n; n.kind = k; n.i = v; return n; }
  static ThriftNode i32(int64_t v) { return integer(kI32, v); }
  static ThriftNode i64(int64_t v) { return integer(kI64, v); }
  static ThriftNode boolean(bool v) { return integer(kBool, v); }
  static ThriftNode binary(std::string s) { ThriftNode n; n.kind = kBinary; n.bin = std::move(s); return n; }
  static ThriftNode list(Kind elem, std::vector<ThriftNode> items) {
    ThriftNode n; n.kind = kList; n.elem = elem; n.items = std::move(items); return n;
  }
  static ThriftNode strukt(std::vector<std::pair<int16_t, ThriftNode>> fields) {
    ThriftNode n; n.kind = kStruct; n.fields = std::move(fields); return n;
  }

  ThriftNode* field(int16_t id) {
    for (auto& [fid, v] : fields) {
      if (fid == id) return &v;
    }
    return nullptr;
  }
  ThriftNode& at(int16_t id) {
    ThriftNode* f = field(id);
    if (!f) throw std::runtime_error("no field " + std::to_string(id));
    return *f;
  }
  void erase(int16_t id) {
    for (size_t k = 0; k < fields.size(); ++k) {
      if (fields[k].first == id) {
        fields.erase(fields.begin() + static_cast<std::ptrdiff_t>(k));
        return;
      }
    }
  }
};

namespace thrift_detail {

inline int wire_type(ThriftNode::Kind k, bool value) {
  switch (k) {
    case ThriftNode::kBool: return value ? 1 : 2;
    case ThriftNode::kI8: return 3;
    case ThriftNode::kI16: return 4;
    case ThriftNode::kI32: return 5;
    case ThriftNode::kI64: return 6;
    case ThriftNode::kBinary: return 8;
    case ThriftNode::kList: return 9;
    case ThriftNode::kStruct: return 12;
  }
  return 0;
}

inline ThriftNode::Kind kind_of(int t) {
  switch (t) {
    case 1: case 2: return ThriftNode::kBool;
    case 3: return ThriftNode::kI8;
    case 4: return ThriftNode::kI16;
    case 5: return ThriftNode::kI32;
    case 6: return ThriftNode::kI64;
    case 8: return ThriftNode::kBinary;
    case 9: return ThriftNode::kList;
    case 12: return ThriftNode::kStruct;
  }
  throw std::runtime_error("thrift test tree: unsupported type " + std::to_string(t));
}

inline void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7F) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}
inline uint64_t zigzag(int64_t v) { return (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63); }

inline void encode_value(std::string& out, const ThriftNode& n);

inline void encode_struct(std::string& out, const ThriftNode& n) {
  int16_t last = 0;
  for (const auto& [id, v] : n.fields) {
    int t = wire_type(v.kind, v.i != 0);
    int delta = id - last;
    if (delta > 0 && delta <= 15) {
      out += static_cast<char>((delta << 4) | t);
    } else {
      out += static_cast<char>(t);
      put_varint(out, zigzag(id));
    }
    last = id;
    if (v.kind != ThriftNode::kBool) encode_value(out, v);
  }
  out += '\0';
}

inline void encode_value(std::string& out, const ThriftNode& n) {
  switch (n.kind) {
    case ThriftNode::kBool: out += static_cast<char>(n.i ? 1 : 0); return;  // a list element
    case ThriftNode::kI8: out += static_cast<char>(n.i); return;
    case ThriftNode::kI16:
    case ThriftNode::kI32:
    case ThriftNode::kI64: put_varint(out, zigzag(n.i)); return;
    case ThriftNode::kBinary: put_varint(out, n.bin.size()); out += n.bin; return;
    case ThriftNode::kList: {
      int t = n.elem == ThriftNode::kBool ? 2 : wire_type(n.elem, false);
      if (n.items.size() < 15) {
        out += static_cast<char>((n.items.size() << 4) | t);
      } else {
        out += static_cast<char>(0xF0 | t);
        put_varint(out, n.items.size());
      }
      for (const ThriftNode& item : n.items) encode_value(out, item);
      return;
    }
    case ThriftNode::kStruct: encode_struct(out, n); return;
  }
}

class Decoder {
 public:
  explicit Decoder(std::string_view b) : b_(b) {}
  size_t pos = 0;
  uint8_t byte() {
    if (pos >= b_.size()) throw std::runtime_error("thrift test tree: out of bytes");
    return static_cast<uint8_t>(b_[pos++]);
  }
  uint64_t varint() {
    uint64_t v = 0;
    for (int s = 0;; s += 7) {
      uint8_t c = byte();
      v |= static_cast<uint64_t>(c & 0x7F) << s;
      if (!(c & 0x80)) return v;
    }
  }
  int64_t zz() { uint64_t v = varint(); return static_cast<int64_t>(v >> 1) ^ -static_cast<int64_t>(v & 1); }

  ThriftNode value(ThriftNode::Kind k) {
    ThriftNode n;
    n.kind = k;
    switch (k) {
      case ThriftNode::kBool: n.i = byte() == 1; break;
      case ThriftNode::kI8: n.i = static_cast<int8_t>(byte()); break;
      case ThriftNode::kI16:
      case ThriftNode::kI32:
      case ThriftNode::kI64: n.i = zz(); break;
      case ThriftNode::kBinary: {
        uint64_t len = varint();
        if (len > b_.size() - pos) throw std::runtime_error("thrift test tree: binary too long");
        n.bin = std::string(b_.substr(pos, len));
        pos += len;
        break;
      }
      case ThriftNode::kList: {
        uint8_t h = byte();
        uint64_t size = h >> 4;
        if (size == 15) size = varint();
        n.elem = kind_of(h & 0x0F);
        for (uint64_t e = 0; e < size; ++e) n.items.push_back(value(n.elem));
        break;
      }
      case ThriftNode::kStruct: {
        int16_t last = 0;
        for (;;) {
          uint8_t h = byte();
          int t = h & 0x0F;
          if (t == 0) break;
          int16_t id = (h >> 4) ? static_cast<int16_t>(last + (h >> 4)) : static_cast<int16_t>(zz());
          last = id;
          ThriftNode v;
          if (t == 1 || t == 2) {
            v.kind = ThriftNode::kBool;
            v.i = t == 1;
          } else {
            v = value(kind_of(t));
          }
          n.fields.emplace_back(id, std::move(v));
        }
        break;
      }
    }
    return n;
  }

 private:
  std::string_view b_;
};

}  // namespace thrift_detail

// Decodes one struct from the start of `bytes`; `used` gets its length.
inline ThriftNode thrift_decode(std::string_view bytes, size_t* used = nullptr) {
  thrift_detail::Decoder d(bytes);
  ThriftNode n = d.value(ThriftNode::kStruct);
  if (used) *used = d.pos;
  return n;
}

inline std::string thrift_encode(const ThriftNode& n) {
  std::string out;
  thrift_detail::encode_value(out, n);
  return out;
}

}  // namespace quill::test
