// Bad Parquet input gets one clear error naming the file (and the row group, column and page
// where they apply): a non-Parquet file, a truncated one, a corrupt footer, a page that does not
// decompress, an unsupported codec or encoding, a missing messages column. The bad files are
// made from pyarrow's fixtures by editing their bytes (footers and page headers through the
// test's own Thrift tree, thrift_test_tree.h).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "base/file_util.h"
#include "data/build_rows.h"
#include "data/byte_tokenizer.h"
#include "data/parquet_conversations.h"
#include "data/parquet_file.h"
#include "data/parquet_metadata.h"
#include "data_test_util.h"
#include "parquet_test_util.h"
#include "thrift_test_tree.h"

namespace quill {
namespace {

using test::expect_error;
using test::parquet_fixture;
using test::TempDir;
using test::ThriftNode;

// A fixture's bytes split at its footer.
struct Split {
  std::string data;  // everything before the footer
  ThriftNode footer;
};

Split split(const std::string& file) {
  uint32_t len;
  std::memcpy(&len, file.data() + file.size() - 8, 4);
  size_t at = file.size() - 8 - len;
  size_t used = 0;
  Split s{file.substr(0, at), test::thrift_decode(std::string_view(file).substr(at, len), &used)};
  EXPECT_EQ(used, len);
  return s;
}

std::string join(const Split& s) {
  std::string f = test::thrift_encode(s.footer);
  std::string out = s.data + f;
  uint32_t len = static_cast<uint32_t>(f.size());
  out.append(reinterpret_cast<const char*>(&len), 4);
  return out + "PAR1";
}

// FileMetaData.row_groups[g].columns[c].meta_data
ThriftNode& column_meta(ThriftNode& footer, size_t g, size_t c) {
  return footer.at(4).items.at(g).at(1).items.at(c).at(3);
}

void read_all(const std::string& path) {
  ThreadPool pool(2);
  ParquetConversations::read({path}, pool);
}

class ParquetErrors : public ::testing::Test {
 protected:
  std::string write(const std::string& name, const std::string& bytes) {
    std::string p = tmp_.sub(name);
    write_file_atomic(p, bytes);
    return p;
  }
  TempDir tmp_;
};

TEST_F(ParquetErrors, FootersRoundTripThroughTheTestTree) {
  // The test's Thrift encoder writes pyarrow's footers back byte for byte, so the edits below
  // change only what they mean to.
  for (const std::string& name : test::parquet_fixture_files()) {
    std::string file = read_file(parquet_fixture(name));
    EXPECT_TRUE(join(split(file)) == file) << name;
  }
}

TEST_F(ParquetErrors, NotParquet) {
  std::string jsonl = read_file(parquet_fixture("conversations.jsonl"));
  std::string p = write("conversations.parquet", jsonl);
  expect_error([&] { ParquetFile f(p); }, {p + ": not a Parquet file (it does not start with the magic PAR1)"});
  expect_error([&] { read_all(write("empty.parquet", "")); }, {"empty.parquet: not a Parquet file"});
  EXPECT_FALSE(has_parquet_magic(p));
  EXPECT_TRUE(has_parquet_magic(parquet_fixture("zstd-v2.parquet")));
  // The data build: by the magic, not the name; a .parquet name without it is refused.
  ByteTokenizer tok;
  BuildOptions o;
  o.row_tokens = 128;
  expect_error([&] { build_rows_from_inputs({p}, tok, o, tmp_.sub("out")); },
               {p + ": not a Parquet file (it does not start with the magic PAR1)"});
  EXPECT_FALSE(std::filesystem::exists(tmp_.sub("out/rows.bin")));
  std::string renamed = write("conversations.data", read_file(parquet_fixture("snappy-v1.parquet")));
  EXPECT_NO_THROW(build_rows_from_inputs({renamed}, tok, o, tmp_.sub("out2")));
  std::string as_jsonl = write("c.jsonl", jsonl);
  expect_error([&] { build_rows_from_inputs({renamed, as_jsonl}, tok, o, tmp_.sub("out3")); },
               {"is Parquet and", "c.jsonl is not"});
  expect_error([&] { build_rows_from_inputs({as_jsonl, as_jsonl}, tok, o, tmp_.sub("out3")); },
               {"2 JSONL files", "quill reads several files only when they are Parquet"});
}

TEST_F(ParquetErrors, Truncated) {
  std::string file = read_file(parquet_fixture("snappy-v1.parquet"));
  for (size_t keep : {file.size() - 1, file.size() / 2, size_t{20}}) {
    std::string p = write("cut.parquet", file.substr(0, keep));
    expect_error([&] { read_all(p); },
                 {p + ": truncated Parquet file: it does not end with the magic PAR1 (" + std::to_string(keep) +
                  " bytes"});
  }
  std::string p = write("tiny.parquet", "PAR1xx");
  expect_error([&] { read_all(p); }, {p + ": truncated Parquet file (6 bytes; the shortest has 12)"});
  // Cut in the middle of the data, the footer kept: the footer points past the end.
  Split s = split(file);
  s.data.resize(s.data.size() / 2);
  p = write("hole.parquet", join(s));
  expect_error([&] { read_all(p); }, {p + ": row group", "corrupt footer: the chunk's pages", "are not inside the file's data"});
  // The build leaves nothing behind.
  ByteTokenizer tok;
  BuildOptions o;
  expect_error([&] { build_rows_from_parquet({p}, tok, o, tmp_.sub("out")); }, {"hole.parquet"});
  EXPECT_FALSE(std::filesystem::exists(tmp_.sub("out/rows.bin")));
}

TEST_F(ParquetErrors, CorruptFooter) {
  std::string file = read_file(parquet_fixture("zstd-v2.parquet"));
  // A length longer than the file.
  std::string bad_len = file;
  uint32_t huge = static_cast<uint32_t>(file.size());
  std::memcpy(bad_len.data() + file.size() - 8, &huge, 4);
  std::string p = write("len.parquet", bad_len);
  expect_error([&] { read_all(p); },
               {p + ": corrupt footer: its length " + std::to_string(huge) + " does not fit the file's"});
  // Garbage in place of the Thrift.
  Split s = split(file);
  std::string garbage = file;
  std::fill(garbage.begin() + static_cast<std::ptrdiff_t>(s.data.size()), garbage.end() - 8, '\xFF');
  p = write("garbage.parquet", garbage);
  expect_error([&] { read_all(p); }, {p + ": footer: corrupt Thrift ("});
  // A required field missing.
  Split no_rows = split(file);
  no_rows.footer.erase(3);
  p = write("norows.parquet", join(no_rows));
  expect_error([&] { read_all(p); }, {p + ": footer: corrupt Thrift (the required field FileMetaData.num_rows is missing"});
  // Row counts that disagree.
  Split rows = split(file);
  rows.footer.at(3).i += 1;
  p = write("rows.parquet", join(rows));
  expect_error([&] { read_all(p); }, {p + ": corrupt footer: the row groups hold 153 rows, the file says 154"});
}

TEST_F(ParquetErrors, PageThatDoesNotDecompress) {
  // The dictionary pages of the snappy and zstd fixtures, and a compressed data page v2 (its
  // values section, after the uncompressed levels) of the PLAIN one.
  struct Case {
    const char* name;
    bool dictionary_page;
    const char* codec;
  };
  for (const Case& c : {Case{"snappy-v1.parquet", true, "SNAPPY"}, Case{"zstd-v2.parquet", true, "ZSTD"},
                        Case{"plain-snappy-v2.parquet", false, "SNAPPY"}}) {
    std::string file = read_file(parquet_fixture(c.name));
    ParquetFile pf(parquet_fixture(c.name));
    const ParquetLeaf& content = *pf.find_leaf("messages.list.element.content");
    const ParquetColumnMeta& m = pf.chunk_meta(1, content);
    size_t at = static_cast<size_t>(c.dictionary_page ? *m.dictionary_page_offset : m.data_page_offset);
    size_t header_bytes = 0;
    ParquetPageHeader h = decode_parquet_page_header(std::string_view(file).substr(at), "t", header_bytes);
    ASSERT_EQ(h.type, c.dictionary_page ? ParquetPageType::kDictionaryPage : ParquetPageType::kDataPageV2);
    size_t levels = 0;
    if (h.data_page_v2) {
      ASSERT_TRUE(h.data_page_v2->is_compressed);
      levels = static_cast<size_t>(h.data_page_v2->repetition_levels_byte_length +
                                   h.data_page_v2->definition_levels_byte_length);
    }
    // Snappy: its length preamble (2 bytes here) left alone, the rest overwritten; zstd: the
    // frame itself.
    size_t keep = std::strcmp(c.codec, "SNAPPY") == 0 ? 2 : 0;
    size_t from = at + header_bytes + levels + keep, to = at + header_bytes + static_cast<size_t>(h.compressed_page_size);
    std::string bad = file;
    std::fill(bad.begin() + static_cast<std::ptrdiff_t>(from), bad.begin() + static_cast<std::ptrdiff_t>(to), '\xFF');
    std::string p = write(std::string("bad-") + c.name, bad);
    expect_error([&] { read_all(p); },
                 {p + ": row group 1, column messages.list.element.content, page 0 (byte " + std::to_string(at) +
                  "): the page does not decompress (" + c.codec});
  }
}

TEST_F(ParquetErrors, UnsupportedCodec) {
  Split s = split(read_file(parquet_fixture("snappy-v1.parquet")));
  column_meta(s.footer, 2, 1).at(4).i = static_cast<int64_t>(ParquetCodec::kGzip);
  std::string p = write("gzip.parquet", join(s));
  expect_error([&] { read_all(p); },
               {p + ": row group 2, column messages.list.element.content: codec GZIP is not supported (quill reads "
                    "UNCOMPRESSED, SNAPPY and ZSTD)"});
}

TEST_F(ParquetErrors, UnsupportedEncodings) {
  std::string file = read_file(parquet_fixture("none-v1.parquet"));
  ParquetFile pf(parquet_fixture("none-v1.parquet"));
  const ParquetLeaf& role = *pf.find_leaf("messages.list.element.role");
  size_t at = static_cast<size_t>(pf.chunk_meta(0, role).data_page_offset), used = 0;
  ThriftNode header = test::thrift_decode(std::string_view(file).substr(at), &used);
  auto with_header = [&](const ThriftNode& h) {
    std::string enc = test::thrift_encode(h);
    EXPECT_EQ(enc.size(), used);  // one-byte enum values: the page keeps its size
    std::string out = file;
    out.replace(at, used, enc);
    return out;
  };
  ThriftNode delta = header;
  delta.at(5).at(2).i = static_cast<int64_t>(ParquetEncoding::kDeltaByteArray);
  std::string p = write("delta.parquet", with_header(delta));
  expect_error([&] { read_all(p); },
               {p + ": row group 0, column messages.list.element.role, page 1 (byte " + std::to_string(at) +
                "): encoding DELTA_BYTE_ARRAY is not supported (quill reads PLAIN, PLAIN_DICTIONARY and "
                "RLE_DICTIONARY byte arrays)"});
  ThriftNode bit_packed = header;
  bit_packed.at(5).at(3).i = static_cast<int64_t>(ParquetEncoding::kBitPacked);
  p = write("bitpacked.parquet", with_header(bit_packed));
  expect_error([&] { read_all(p); }, {"definition level encoding BIT_PACKED is not supported (quill reads RLE levels)"});
}

TEST_F(ParquetErrors, ArrowRsDeltaByteArrayFallbackIsRefusedByName) {
  // arrow-rs's version-2 writer falls back from an overflowing dictionary to DELTA_BYTE_ARRAY
  // (tools/parquet/make_arrow_rs_fixture.mjs --fallback default): not read, one clear error.
  std::string p = parquet_fixture("arrow-rs-zstd-v2-delta.parquet");
  expect_error([&] { read_all(p); },
               {p + ": row group 0, column messages.list.item.content, page 2 (byte ",
                "encoding DELTA_BYTE_ARRAY is not supported (quill reads PLAIN, PLAIN_DICTIONARY and RLE_DICTIONARY "
                "byte arrays)"});
}

TEST_F(ParquetErrors, MissingOrMisshapenMessagesColumn) {
  std::string file = read_file(parquet_fixture("plain-snappy-v2.parquet"));
  // Renames a schema element and the matching entries of every chunk's path_in_schema.
  auto renamed = [&](const std::string& from, const std::string& to) {
    Split s = split(file);
    for (ThriftNode& e : s.footer.at(2).items) {
      if (e.at(4).bin == from) e.at(4).bin = to;
    }
    for (ThriftNode& g : s.footer.at(4).items) {
      for (ThriftNode& c : g.at(1).items) {
        for (ThriftNode& part : c.at(3).at(3).items) {
          if (part.bin == from) part.bin = to;
        }
      }
    }
    return join(s);
  };
  std::string p = write("nomessages.parquet", renamed("messages", "messagez"));
  expect_error([&] { read_all(p); }, {p + ": no messages column (the file's columns: id, messagez, source)"});
  p = write("rolf.parquet", renamed("role", "rolf"));
  expect_error([&] { read_all(p); },
               {p + ": column messages.list.element.rolf: quill reads a message's content and role only"});
  p = write("tools.parquet", renamed("source", "tools"));
  expect_error([&] { read_all(p); }, {p + ": a tools column, which quill does not read from Parquet"});
  // The footer's chunk disagreeing with the schema.
  Split s = split(file);
  column_meta(s.footer, 0, 1).at(1).i = static_cast<int64_t>(ParquetType::kInt64);
  p = write("type.parquet", join(s));
  expect_error([&] { read_all(p); },
               {p + ": row group 0, column messages.list.element.content: corrupt footer: the chunk is INT64, the "
                    "schema says BYTE_ARRAY"});
}

TEST_F(ParquetErrors, ValueCountsThatDisagree) {
  // The footer promises more values than the pages hold.
  Split s = split(read_file(parquet_fixture("none-v1.parquet")));
  column_meta(s.footer, 3, 2).at(5).i += 1;
  std::string p = write("count.parquet", join(s));
  expect_error([&] { read_all(p); }, {p + ": row group 3, column messages.list.element.role: the chunk's pages end after"});
}

}  // namespace
}  // namespace quill
