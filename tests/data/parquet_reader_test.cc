// The Parquet reader on pyarrow's fixtures (tests/data/fixtures/parquet): every file reads to
// the conversations, ids and sources of conversations.jsonl, whatever the codec, page version,
// dictionary or thread count; and on files written by the test (parquet_test_writer.h) with the
// nulls and empty lists pyarrow's fixtures lack.
#include <gtest/gtest.h>

#include <random>

#include "base/file_util.h"
#include "data/conversation.h"
#include "data/parquet_column.h"
#include "data/parquet_conversations.h"
#include "data/parquet_file.h"
#include "data_test_util.h"
#include "parquet_test_util.h"
#include "parquet_test_writer.h"

namespace quill {
namespace {

using test::expect_error;
using test::parquet_fixture;
using test::TempDir;
using test::TestMessage;
using test::TestRow;

void expect_same_as_jsonl(const ParquetConversations& convs, const std::string& name) {
  std::vector<nlohmann::json> jsonl = test::parquet_fixture_jsonl();
  ASSERT_EQ(jsonl.size(), 153u);
  ASSERT_EQ(convs.size(), 153) << name;
  EXPECT_EQ(convs.rows(), 153);
  EXPECT_EQ(convs.invalid_skipped(), 0);
  for (int64_t k = 0; k < convs.size(); ++k) {
    const nlohmann::json& j = jsonl[static_cast<size_t>(k)];
    nlohmann::json want = conversation_to_json(conversation_from_json(j, "jsonl"));
    ASSERT_EQ(conversation_to_json(convs.conversation(k)), want) << name << " conversation " << k;
    EXPECT_EQ(convs.id(k), j.at("id").get<std::string>()) << name;
    EXPECT_EQ(convs.source(k), j.at("source").get<std::string>()) << name;
  }
}

TEST(ParquetReader, EveryFixtureReadsToTheJsonlConversations) {
  ThreadPool pool(2);
  for (const std::string& name : test::parquet_fixture_files()) {
    expect_same_as_jsonl(ParquetConversations::read({parquet_fixture(name)}, pool), name);
  }
}

TEST(ParquetReader, SeveralFilesInOrder) {
  ThreadPool pool(2);
  ParquetConversations convs =
      ParquetConversations::read({parquet_fixture("part-0.parquet"), parquet_fixture("part-1.parquet")}, pool);
  expect_same_as_jsonl(convs, "part-0 + part-1");
  ASSERT_EQ(convs.files().size(), 2u);
  EXPECT_EQ(convs.files()[0].rows, 76);
  EXPECT_EQ(convs.files()[1].rows, 77);
  EXPECT_EQ(convs.files()[0].row_groups, 2);
  // The other order gives the other order.
  ParquetConversations swapped =
      ParquetConversations::read({parquet_fixture("part-1.parquet"), parquet_fixture("part-0.parquet")}, pool);
  EXPECT_EQ(swapped.id(0), "quill_fixture_76");
  EXPECT_EQ(swapped.id(77), "quill_fixture_0");
}

TEST(ParquetReader, SameWhateverTheThreadCount) {
  for (int threads : {1, 3}) {
    ThreadPool pool(threads);
    expect_same_as_jsonl(ParquetConversations::read({parquet_fixture("zstd-v2.parquet")}, pool),
                         "threads " + std::to_string(threads));
  }
}

TEST(ParquetReader, Sha256OfTheFilesInOrder) {
  ThreadPool pool(2);
  ParquetReadOptions o;
  o.sha256 = true;
  std::string a = read_file(parquet_fixture("part-0.parquet")), b = read_file(parquet_fixture("part-1.parquet"));
  ParquetConversations convs =
      ParquetConversations::read({parquet_fixture("part-0.parquet"), parquet_fixture("part-1.parquet")}, pool, o);
  EXPECT_EQ(convs.sha256(), sha256_hex(a + b));
  EXPECT_EQ(convs.bytes(), static_cast<int64_t>(a.size() + b.size()));
  EXPECT_TRUE(ParquetConversations::read({parquet_fixture("part-0.parquet")}, pool).sha256().empty());
}

// The fixtures are what fixtures.json says, and exercise what the reader must handle: several
// row groups, several data pages per chunk, dictionary pages or PLAIN, page v1 or v2, codecs.
TEST(ParquetReader, FixturesCoverWhatTheyClaim) {
  int most_pages = 0;
  nlohmann::json settings = nlohmann::json::parse(read_file(parquet_fixture("fixtures.json")));
  for (const std::string& name : test::parquet_fixture_files()) {
    const nlohmann::json& s = settings["files"][name];
    ParquetFile file(parquet_fixture(name));
    EXPECT_EQ(static_cast<int64_t>(file.row_groups()), settings["row_groups"][name].get<int64_t>()) << name;
    const ParquetLeaf* content = file.find_leaf("messages.list.element.content");
    ASSERT_NE(content, nullptr) << name;
    EXPECT_EQ(content->max_def, 4);
    EXPECT_EQ(content->max_rep, 1);
    ASSERT_NE(file.find_leaf("messages.list.element.role"), nullptr);
    ASSERT_NE(file.find_leaf("id"), nullptr);
    ParquetCodec want = s["compression"] == "none"     ? ParquetCodec::kUncompressed
                        : s["compression"] == "snappy" ? ParquetCodec::kSnappy
                                                       : ParquetCodec::kZstd;
    for (size_t g = 0; g < file.row_groups(); ++g) {
      EXPECT_EQ(file.chunk_meta(g, *content).codec, want) << name;
      PageDecompressor d;
      ByteArrayChunk chunk = read_byte_array_chunk(file, g, *content, d);
      EXPECT_EQ(chunk.dictionary, s["use_dictionary"].get<bool>()) << name;
      bool v2 = s["data_page_version"] == "2.0";
      EXPECT_EQ(chunk.pages_v1 > 0, !v2) << name;
      EXPECT_EQ(chunk.pages_v2 > 0, v2) << name;
      most_pages = std::max(most_pages, chunk.pages_v1 + chunk.pages_v2);
    }
  }
  // 40 rows of these conversations fit one 4 KiB data page once their text is in a dictionary
  // page; without one (plain-snappy-v2) a chunk spans two. Pages that begin inside a row (data
  // page v1 allows it) are tested on files the test writes (RowsSplitAcrossPages).
  EXPECT_GE(most_pages, 2) << "no fixture chunk with several data pages";
}

// A second writer (arrow-rs, through parquet-wasm: tools/parquet/make_arrow_rs_fixture.mjs): its
// list's element is named "item", and its dictionaries overflow into PLAIN pages mid-chunk.
TEST(ParquetReader, ArrowRsFixtureWithDictionaryFallback) {
  const std::string name = "arrow-rs-zstd-v2-fallback.parquet";
  ThreadPool pool(2);
  expect_same_as_jsonl(ParquetConversations::read({parquet_fixture(name)}, pool), name);
  ParquetFile file(parquet_fixture(name));
  const ParquetLeaf* content = file.find_leaf("messages.list.item.content");
  ASSERT_NE(content, nullptr);
  bool fallback = false;
  for (size_t g = 0; g < file.row_groups(); ++g) {
    PageDecompressor d;
    ByteArrayChunk chunk = read_byte_array_chunk(file, g, *content, d);
    EXPECT_GT(chunk.pages_v2, 0);
    EXPECT_EQ(chunk.pages_v1, 0);
    fallback |= chunk.dictionary && chunk.plain_pages > 0 && chunk.plain_pages < chunk.pages_v2;
  }
  EXPECT_TRUE(fallback) << "no chunk with both dictionary-encoded and PLAIN pages";
}

// ---- files written by the test: nulls and empty lists

std::vector<TestRow> rows_with_every_case() {
  auto msg = [](std::optional<std::string> role, std::optional<std::string> content) {
    return std::optional<TestMessage>(TestMessage{std::move(content), std::move(role)});
  };
  std::vector<TestRow> rows;
  rows.push_back({"r0", std::vector{msg("user", "hi"), msg("assistant", "hello")}});
  rows.push_back({"r1", std::vector<std::optional<TestMessage>>{}});                      // empty list: kept
  rows.push_back({"r2", std::nullopt});                                                   // null list
  rows.push_back({"r3", std::vector{msg("user", "a"), std::optional<TestMessage>()}});    // null message
  rows.push_back({"r4", std::vector{msg("user", "q"), msg(std::nullopt, "x")}});          // null role
  rows.push_back({"r5", std::vector{msg("robot", "x")}});                                 // unknown role
  rows.push_back({"r6", std::vector{msg("user", std::string("bad \xC3\x28 utf8"))}});     // invalid UTF-8
  rows.push_back({std::nullopt, std::vector{msg("user", std::nullopt), msg("assistant", "ok")}});  // null id, null content
  rows.push_back({"r8", std::vector{msg("system", ""), msg("user", "x"), msg("model", "y")}});
  return rows;
}

TEST(ParquetReader, NullsAndEmptyListsAreHandledHonestly) {
  TempDir tmp;
  std::string path = tmp.sub("cases.parquet");
  write_file_atomic(path, test::write_test_parquet(rows_with_every_case(), /*rows_per_group=*/2));
  ThreadPool pool(2);
  // The first invalid row stops the read, named by file, row, id and column.
  expect_error([&] { ParquetConversations::read({path}, pool); }, {path + ": row 2 (id r2): messages is null"});
  ParquetReadOptions skip;
  skip.skip_invalid = true;
  ParquetConversations convs = ParquetConversations::read({path}, pool, skip);
  EXPECT_EQ(convs.rows(), 9);
  EXPECT_EQ(convs.invalid_skipped(), 5);
  ASSERT_EQ(convs.skipped_errors().size(), 5u);
  EXPECT_EQ(convs.skipped_errors()[0], path + ": row 2 (id r2): messages is null (column messages)");
  EXPECT_EQ(convs.skipped_errors()[1], path + ": row 3 (id r3): messages[1] is null (column messages.list.element)");
  EXPECT_EQ(convs.skipped_errors()[2],
            path + ": row 4 (id r4): messages[1]: role is null (column messages.list.element.role)");
  EXPECT_EQ(convs.skipped_errors()[3],
            path + ": row 5 (id r5): messages[0]: unknown role \"robot\" (expected system, developer, user, "
                   "assistant, model or tool)");
  EXPECT_EQ(convs.skipped_errors()[4],
            path + ": row 6 (id r6): messages[0]: invalid UTF-8 at byte 5 of the content (column "
                   "messages.list.element.content)");
  ASSERT_EQ(convs.size(), 4);
  // Kept: r0, r1 (empty), the row with a null id (its null content is empty text, as JSON null
  // content is), r8 (system/model spellings as the JSONL reader reads them).
  auto json_of = [](const char* text) { return conversation_to_json(conversation_from_json(nlohmann::json::parse(text), "t")); };
  EXPECT_EQ(conversation_to_json(convs.conversation(0)),
            json_of(R"({"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"}]})"));
  EXPECT_EQ(convs.id(0), "r0");
  EXPECT_EQ(conversation_to_json(convs.conversation(1)), json_of(R"({"messages":[]})"));
  EXPECT_EQ(convs.id(1), "r1");
  EXPECT_EQ(conversation_to_json(convs.conversation(2)),
            json_of(R"({"messages":[{"role":"user","content":null},{"role":"assistant","content":"ok"}]})"));
  EXPECT_EQ(convs.id(2), "");
  EXPECT_EQ(conversation_to_json(convs.conversation(3)),
            json_of(R"({"messages":[{"role":"system","content":""},{"role":"user","content":"x"},{"role":"model","content":"y"}]})"));
  EXPECT_EQ(convs.content_bytes(3), 2);
}

TEST(ParquetReader, RandomConversationsRoundTrip) {
  std::mt19937 rng(11);
  const char* roles[] = {"system", "user", "assistant", "tool", "developer", "model"};
  std::vector<TestRow> rows;
  std::vector<std::string> want;
  for (int r = 0; r < 500; ++r) {
    std::vector<std::optional<TestMessage>> msgs;
    nlohmann::json j = {{"messages", nlohmann::json::array()}};
    int n = static_cast<int>(rng() % 6);
    for (int m = 0; m < n; ++m) {
      std::string role = roles[rng() % 6];
      std::string content(rng() % 50, 'a' + static_cast<char>(rng() % 26));
      bool null_content = rng() % 7 == 0;
      msgs.push_back(TestMessage{null_content ? std::nullopt : std::optional<std::string>(content), role});
      j["messages"].push_back({{"role", role}, {"content", null_content ? nlohmann::json() : nlohmann::json(content)}});
    }
    rows.push_back({"id" + std::to_string(r), msgs});
    want.push_back(conversation_to_json(conversation_from_json(j, "t")).dump());
  }
  TempDir tmp;
  write_file_atomic(tmp.sub("r.parquet"), test::write_test_parquet(rows, 37));
  ThreadPool pool(3);
  ParquetConversations convs = ParquetConversations::read({tmp.sub("r.parquet")}, pool);
  ASSERT_EQ(convs.size(), 500);
  for (int64_t k = 0; k < 500; ++k) {
    ASSERT_EQ(conversation_to_json(convs.conversation(k)).dump(), want[static_cast<size_t>(k)]) << k;
    EXPECT_EQ(convs.id(k), "id" + std::to_string(k));
  }
}

TEST(ParquetReader, RowsSplitAcrossPages) {
  // Data pages v1 of 3 levels: most rows' messages span two or more pages of each leaf.
  std::vector<TestRow> rows;
  for (int r = 0; r < 40; ++r) {
    std::vector<std::optional<TestMessage>> msgs;
    for (int m = 0; m < r % 5; ++m) msgs.push_back(TestMessage{"m" + std::to_string(r) + "." + std::to_string(m), m % 2 ? "assistant" : "user"});
    rows.push_back({"id" + std::to_string(r), msgs});
  }
  TempDir tmp;
  write_file_atomic(tmp.sub("p.parquet"), test::write_test_parquet(rows, 16, 3));
  ParquetFile file(tmp.sub("p.parquet"));
  PageDecompressor d;
  EXPECT_GE(read_byte_array_chunk(file, 0, *file.find_leaf("messages.list.element.content"), d).pages_v1, 5);
  ThreadPool pool(2);
  ParquetConversations convs = ParquetConversations::read({tmp.sub("p.parquet")}, pool);
  ASSERT_EQ(convs.size(), 40);
  for (int r = 0; r < 40; ++r) {
    Conversation c = convs.conversation(r);
    ASSERT_EQ(c.messages.size(), static_cast<size_t>(r % 5)) << r;
    for (int m = 0; m < r % 5; ++m) {
      EXPECT_EQ(c.messages[static_cast<size_t>(m)].content, "m" + std::to_string(r) + "." + std::to_string(m));
      EXPECT_EQ(c.messages[static_cast<size_t>(m)].role, m % 2 ? Role::kModel : Role::kUser);
    }
  }
}

TEST(ParquetReader, AFileWithNoRows) {
  TempDir tmp;
  write_file_atomic(tmp.sub("empty.parquet"), test::write_test_parquet({}));
  ThreadPool pool(1);
  ParquetConversations convs = ParquetConversations::read({tmp.sub("empty.parquet")}, pool);
  EXPECT_EQ(convs.size(), 0);
  EXPECT_EQ(convs.rows(), 0);
}

}  // namespace
}  // namespace quill
