// A reader of Apache Thrift's compact protocol, the encoding of Parquet's footer (FileMetaData)
// and page headers (docs/parquet.md; the protocol: Apache Thrift, doc/specs/thrift-compact-
// protocol.md). Only decoding, over bytes in memory, with every read bounds-checked: a truncated
// or corrupt structure is a quill::Error naming `what` (the file and the structure) and the byte
// offset, never a read past the end.
//
// The encoding, in short: integers are ULEB128 varints, signed ones zigzag-folded first
// (0, -1, 1, -2, ... -> 0, 1, 2, 3, ...); a struct is a run of fields ended by a 0 byte, each
// field a header byte `ddddtttt` (d: the field id's delta from the previous field of the same
// struct, 1..15; 0 means a zigzag i16 id follows; t: the type) then the value; booleans live in
// the field header's type (1 true, 2 false); binary is a varint length then bytes; a list is a
// header `sssstttt` (s: size 0..14, or 15 and a varint size follows; t: element type) then the
// elements (booleans one byte each); a map is a varint size, then (when not empty) a byte with
// the key and value types, then the pairs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace quill {

// Compact protocol type ids (field types; list element types use the same numbers, except that a
// boolean element is type 1 or 2 and takes one byte).
enum class ThriftType : uint8_t {
  kStop = 0,
  kTrue = 1,
  kFalse = 2,
  kI8 = 3,
  kI16 = 4,
  kI32 = 5,
  kI64 = 6,
  kDouble = 7,
  kBinary = 8,
  kList = 9,
  kSet = 10,
  kMap = 11,
  kStruct = 12,
  kUuid = 13,
};

// Zigzag folding back to a signed value (the protocol's integer encoding).
inline int64_t zigzag_decode(uint64_t v) { return static_cast<int64_t>(v >> 1) ^ -static_cast<int64_t>(v & 1); }

class ThriftReader {
 public:
  struct Field {
    int16_t id = 0;
    ThriftType type = ThriftType::kStop;  // kStop: the struct has ended
  };
  struct ListHeader {
    int64_t size = 0;
    ThriftType element = ThriftType::kStop;
  };

  // `what` prefixes every error ("data.parquet: footer").
  ThriftReader(std::string_view bytes, std::string what);

  // Structs: begin_struct(), then next_field() until it returns kStop (each field's value read
  // or skipped in between); next_field() at kStop also closes the struct.
  void begin_struct();
  Field next_field();

  // Field values. A boolean field's value is its type (kTrue/kFalse).
  bool read_bool(const Field& f) const;
  int32_t read_i32();
  int64_t read_i64();
  std::string_view read_binary();  // a view into the bytes given to the constructor
  ListHeader read_list_header();
  // Skips one value of type `type` (structs, lists and maps with everything inside).
  void skip(ThriftType type);

  // An i32 field whose type must be I32 (or an i16/i8); errors name `name`.
  int32_t read_i32_field(const Field& f, const char* name);
  int64_t read_i64_field(const Field& f, const char* name);  // I64 (or a narrower integer)
  std::string_view read_binary_field(const Field& f, const char* name);
  bool read_bool_field(const Field& f, const char* name) const;
  // Checks that a list field holds elements of `element` type and returns its size.
  int64_t read_list_field(const Field& f, ThriftType element, const char* name);

  uint64_t read_varint();
  size_t position() const { return pos_; }
  [[noreturn]] void fail(std::string_view problem) const;

 private:
  void skip_depth(ThriftType type, int depth);
  uint8_t read_byte();
  void need(size_t n) const;

  std::string_view bytes_;
  std::string what_;
  size_t pos_ = 0;
  // The last field id of each open struct (field ids are deltas within their struct).
  static constexpr int kMaxDepth = 64;
  int16_t last_id_[kMaxDepth] = {};
  int depth_ = 0;
};

}  // namespace quill
