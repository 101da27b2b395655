// The Thrift compact protocol reader (src/data/thrift_compact.h): varints, zigzag, field headers
// in both forms, booleans, lists, skipping, and errors on truncated or malformed bytes.
#include "data/thrift_compact.h"

#include <gtest/gtest.h>

#include "data_test_util.h"
#include "thrift_test_tree.h"

namespace quill {
namespace {

using test::expect_error;
using test::ThriftNode;

std::string bytes(std::initializer_list<int> b) {
  std::string s;
  for (int x : b) s += static_cast<char>(x);
  return s;
}

TEST(ThriftCompact, Varint) {
  // The spec's example: 50399 = 0xDF 0x89 0x03.
  std::string b = bytes({0xDF, 0x89, 0x03, 0x00, 0x7F, 0x80, 0x01});
  ThriftReader r(b, "t");
  EXPECT_EQ(r.read_varint(), 50399u);
  EXPECT_EQ(r.read_varint(), 0u);
  EXPECT_EQ(r.read_varint(), 127u);
  EXPECT_EQ(r.read_varint(), 128u);
  EXPECT_EQ(r.position(), b.size());
  std::string max = bytes({0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01});
  EXPECT_EQ(ThriftReader(max, "t").read_varint(), UINT64_MAX);
}

TEST(ThriftCompact, Zigzag) {
  // 0, 1, 2, 3, 4 on the wire are 0, -1, 1, -2, 2.
  EXPECT_EQ(zigzag_decode(0), 0);
  EXPECT_EQ(zigzag_decode(1), -1);
  EXPECT_EQ(zigzag_decode(2), 1);
  EXPECT_EQ(zigzag_decode(3), -2);
  EXPECT_EQ(zigzag_decode(4), 2);
  EXPECT_EQ(zigzag_decode(UINT64_MAX), INT64_MIN);
  EXPECT_EQ(zigzag_decode(UINT64_MAX - 1), INT64_MAX);
  std::string b = bytes({0x03, 0xFE, 0xFF, 0xFF, 0xFF, 0x0F, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F});
  ThriftReader r(b, "t");
  EXPECT_EQ(r.read_i32(), -2);
  EXPECT_EQ(r.read_i32(), INT32_MAX);
  EXPECT_EQ(r.read_i32(), INT32_MIN);
  std::string big = bytes({0x80, 0x80, 0x80, 0x80, 0x10});  // 2^32 folded: beyond i32
  expect_error([&] { ThriftReader(big, "t").read_i32(); }, {"t: corrupt Thrift", "out of range"});
}

TEST(ThriftCompact, VarintErrors) {
  expect_error([&] { ThriftReader(bytes({0x80, 0x80}), "f.parquet: footer").read_varint(); },
               {"f.parquet: footer: corrupt Thrift", "at byte 2 of 2"});
  std::string eleven(10, static_cast<char>(0x80));
  eleven += '\x01';
  expect_error([&] { ThriftReader(eleven, "t").read_varint(); }, {"longer than"});
  std::string too_wide = bytes({0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x02});
  expect_error([&] { ThriftReader(too_wide, "t").read_varint(); }, {"longer than 64 bits"});
}

TEST(ThriftCompact, FieldHeadersBothForms) {
  // Field 1 i32 = 5 (short form), field 3 true, field 20 (long form, zigzag 40) binary "ab",
  // field 21 (short form after 20) false, stop.
  std::string b = bytes({0x15, 0x0A, 0x21, 0x08, 0x28, 0x02, 'a', 'b', 0x12, 0x00});
  ThriftReader r(b, "t");
  r.begin_struct();
  ThriftReader::Field f = r.next_field();
  EXPECT_EQ(f.id, 1);
  EXPECT_EQ(r.read_i32_field(f, "x"), 5);
  f = r.next_field();
  EXPECT_EQ(f.id, 3);
  EXPECT_TRUE(r.read_bool_field(f, "x"));
  f = r.next_field();
  EXPECT_EQ(f.id, 20);
  EXPECT_EQ(r.read_binary_field(f, "x"), "ab");
  f = r.next_field();
  EXPECT_EQ(f.id, 21);
  EXPECT_FALSE(r.read_bool_field(f, "x"));
  EXPECT_EQ(r.next_field().type, ThriftType::kStop);
  EXPECT_EQ(r.position(), b.size());
}

TEST(ThriftCompact, NestedStructsKeepTheirOwnFieldIds) {
  // {1: {5: i32 7}, 2: i32 9}: the inner struct's deltas start from 0, the outer's resume at 1.
  std::string b = thrift_encode(ThriftNode::strukt(
      {{1, ThriftNode::strukt({{5, ThriftNode::i32(7)}})}, {2, ThriftNode::i32(9)}}));
  ThriftReader r(b, "t");
  r.begin_struct();
  ThriftReader::Field f = r.next_field();
  ASSERT_EQ(f.id, 1);
  ASSERT_EQ(f.type, ThriftType::kStruct);
  r.begin_struct();
  f = r.next_field();
  EXPECT_EQ(f.id, 5);
  EXPECT_EQ(r.read_i32(), 7);
  EXPECT_EQ(r.next_field().type, ThriftType::kStop);
  f = r.next_field();
  EXPECT_EQ(f.id, 2);
  EXPECT_EQ(r.read_i32(), 9);
  EXPECT_EQ(r.next_field().type, ThriftType::kStop);
}

TEST(ThriftCompact, Lists) {
  std::vector<ThriftNode> many;
  for (int i = 0; i < 20; ++i) many.push_back(ThriftNode::i32(i - 10));
  std::string b = thrift_encode(ThriftNode::strukt({{1, ThriftNode::list(ThriftNode::kI32, {ThriftNode::i32(3)})},
                                                     {2, ThriftNode::list(ThriftNode::kI32, many)}}));
  ThriftReader r(b, "t");
  r.begin_struct();
  ThriftReader::Field f = r.next_field();
  ASSERT_EQ(r.read_list_field(f, ThriftType::kI32, "a"), 1);  // short form
  EXPECT_EQ(r.read_i32(), 3);
  f = r.next_field();
  ASSERT_EQ(r.read_list_field(f, ThriftType::kI32, "b"), 20);  // long form: 0xF5 then the size
  for (int i = 0; i < 20; ++i) EXPECT_EQ(r.read_i32(), i - 10);
  EXPECT_EQ(r.next_field().type, ThriftType::kStop);
  // A list claiming more elements than there are bytes is refused before anything is read.
  expect_error([&] { ThriftReader(bytes({0xF5, 0xFF, 0xFF, 0x03}), "t").read_list_header(); },
               {"a list of 65535 elements with 0 bytes left"});
  // The wrong element type.
  std::string wrong = thrift_encode(ThriftNode::strukt({{1, ThriftNode::list(ThriftNode::kBinary, {ThriftNode::binary("x")})}}));
  ThriftReader w(wrong, "t");
  w.begin_struct();
  f = w.next_field();
  expect_error([&] { w.read_list_field(f, ThriftType::kStruct, "FileMetaData.schema"); },
               {"field FileMetaData.schema is a list of binary, expected struct"});
}

TEST(ThriftCompact, SkipsEveryKindOfValue) {
  // A struct of one of everything, skipped as one value, then a field read after it.
  std::string inner = thrift_encode(ThriftNode::strukt(
      {{1, ThriftNode::boolean(true)},
       {2, ThriftNode::integer(ThriftNode::kI8, -3)},
       {3, ThriftNode::integer(ThriftNode::kI16, 300)},
       {4, ThriftNode::i64(-1234567890123)},
       {5, ThriftNode::binary("hello")},
       {6, ThriftNode::list(ThriftNode::kStruct, {ThriftNode::strukt({{1, ThriftNode::i32(1)}})})},
       {7, ThriftNode::list(ThriftNode::kBool, {ThriftNode::boolean(true), ThriftNode::boolean(false)})},
       {100, ThriftNode::strukt({{1, ThriftNode::list(ThriftNode::kBinary, {ThriftNode::binary("x")})}})}}));
  // Appended by hand: a double (type 7) field 8 bytes long, a uuid (13), an empty and a full map.
  std::string all = inner.substr(0, inner.size() - 1);
  all += bytes({0x17, 0, 0, 0, 0, 0, 0, 0xF0, 0x3F});                       // field 101: 1.0
  all += bytes({0x1D}) + std::string(16, 'u');                              // field 102: uuid
  all += bytes({0x1B, 0x00});                                               // field 103: {}
  all += bytes({0x1B, 0x02, 0x85, 0x01, 'k', 0x02, 0x01, 'l', 0x04});       // field 104: {"k": 1, "l": 2}
  all += '\0';
  std::string outer = bytes({0x1C}) + all + bytes({0x15, 0x2A, 0x00});  // {1: <all>, 2: 21}
  ThriftReader r(outer, "t");
  r.begin_struct();
  ThriftReader::Field f = r.next_field();
  r.skip(f.type);
  f = r.next_field();
  EXPECT_EQ(f.id, 2);
  EXPECT_EQ(r.read_i32(), 21);
  EXPECT_EQ(r.next_field().type, ThriftType::kStop);
  EXPECT_EQ(r.position(), outer.size());
}

TEST(ThriftCompact, ErrorsNameWhatAndWhere) {
  // A binary longer than what is left.
  expect_error([&] { ThriftReader(bytes({0x05, 'a'}), "x.parquet: page 3 header").read_binary(); },
               {"x.parquet: page 3 header: corrupt Thrift (a binary of 5 bytes, 1 left at byte 1 of 2)"});
  // A struct cut off before its stop byte.
  std::string cut = thrift_encode(ThriftNode::strukt({{1, ThriftNode::i32(1)}}));
  cut.pop_back();
  ThriftReader r(cut, "t");
  r.begin_struct();
  ThriftReader::Field f = r.next_field();
  r.skip(f.type);
  expect_error([&] { r.next_field(); }, {"corrupt Thrift", "1 more bytes needed, 0 left"});
  // An unknown field type.
  std::string unknown = bytes({0x1E, 0x00});  // (a reader keeps a view: the bytes must outlive it)
  ThriftReader u(unknown, "t");
  u.begin_struct();
  expect_error([&] { u.next_field(); }, {"unknown field type 14"});
  // Nesting deeper than the skip limit.
  std::string deep;
  for (int i = 0; i < 100; ++i) deep += bytes({0x1C});
  expect_error([&] { ThriftReader(deep, "t").skip(ThriftType::kStruct); }, {"nested too deep"});
  // A field read as the wrong type.
  std::string named = thrift_encode(ThriftNode::strukt({{4, ThriftNode::binary("n")}}));
  ThriftReader w(named, "t");
  w.begin_struct();
  f = w.next_field();
  expect_error([&] { w.read_i32_field(f, "SchemaElement.num_children"); },
               {"field SchemaElement.num_children is binary, expected i32"});
}

}  // namespace
}  // namespace quill
