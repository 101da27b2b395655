// The synthetic set: deterministic, correct answers, ASCII, the bundled JSONL in sync with the
// generator, and byte-identical rows builds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>

#include "base/file_util.h"
#include "data/byte_tokenizer.h"
#include "data/chat_render.h"
#include "data/rows.h"
#include "data/synthetic.h"
#include "data_test_util.h"

namespace quill {
namespace {

using test::TempDir;

std::vector<int> ints(const std::string& s) {
  std::istringstream in(s);
  std::vector<int> v;
  for (int x; in >> x;) v.push_back(x);
  return v;
}

// Checks one exchange against its task's definition.
void check_answer(const std::string& prompt, const std::string& answer) {
  auto after = [&](const std::string& prefix) { return prompt.substr(prefix.size()); };
  if (prompt.rfind("reverse: ", 0) == 0) {
    std::string s = after("reverse: ");
    EXPECT_EQ(answer, std::string(s.rbegin(), s.rend()));
    EXPECT_TRUE(s.size() >= 3 && s.size() <= 8) << prompt;
  } else if (prompt.rfind("upper: ", 0) == 0) {
    std::string s = after("upper: ");
    std::transform(s.begin(), s.end(), s.begin(), [](char c) { return static_cast<char>(c - 'a' + 'A'); });
    EXPECT_EQ(answer, s);
  } else if (prompt.rfind("sort: ", 0) == 0) {
    std::vector<int> v = ints(after("sort: "));
    std::sort(v.begin(), v.end());
    EXPECT_EQ(ints(answer), v);
    EXPECT_TRUE(v.size() >= 3 && v.size() <= 6) << prompt;
  } else if (prompt.rfind("add ", 0) == 0) {
    std::vector<int> v = ints(after("add "));
    ASSERT_EQ(v.size(), 2u) << prompt;
    EXPECT_EQ(answer, std::to_string(v[0] + v[1]));
  } else if (prompt.rfind("max: ", 0) == 0) {
    std::vector<int> v = ints(after("max: "));
    EXPECT_EQ(answer, std::to_string(*std::max_element(v.begin(), v.end())));
  } else {
    ADD_FAILURE() << "unknown task: " << prompt;
  }
}

TEST(Synthetic, DeterministicAndSeeded) {
  std::string a = conversations_to_jsonl(generate_synthetic_conversations(200, 5));
  std::string b = conversations_to_jsonl(generate_synthetic_conversations(200, 5));
  std::string c = conversations_to_jsonl(generate_synthetic_conversations(200, 6));
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  // A prefix of a longer run is the shorter run.
  std::string longer = conversations_to_jsonl(generate_synthetic_conversations(300, 5));
  EXPECT_EQ(longer.substr(0, a.size()), a);
}

TEST(Synthetic, FirstConversationIsPinned) {
  // SplitMix64(42): below(5) = 3 (no system message), below(6) = 0 (two exchanges),
  // below(5) = 1 (upper), ... A change here is a deliberate generator change: regenerate the bundle.
  std::vector<Conversation> cs = generate_synthetic_conversations(2, 42);
  EXPECT_EQ(conversations_to_jsonl(cs),
            "{\"messages\":[{\"content\":\"upper: awfui\",\"role\":\"user\"},{\"content\":\"AWFUI\",\"role\":\"assistant\"},"
            "{\"content\":\"upper: nnrfc\",\"role\":\"user\"},{\"content\":\"NNRFC\",\"role\":\"assistant\"}]}\n"
            "{\"messages\":[{\"content\":\"Be brief and exact.\",\"role\":\"system\"},{\"content\":\"reverse: qbhtuy\",\"role\":\"user\"},"
            "{\"content\":\"yuthbq\",\"role\":\"assistant\"}]}\n");
}

TEST(Synthetic, AnswersAreCorrectAndTextIsAscii) {
  std::vector<Conversation> cs = generate_synthetic_conversations(2000, 42);
  int with_system = 0, with_reasoning = 0, two_exchanges = 0;
  std::vector<int> per_task(5, 0);
  const char* prefixes[] = {"reverse: ", "upper: ", "sort: ", "add ", "max: "};
  for (const Conversation& c : cs) {
    size_t i = 0;
    if (c.messages[0].role == Role::kSystem) {
      ++with_system;
      ++i;
    }
    int exchanges = 0;
    for (; i < c.messages.size(); i += 2, ++exchanges) {
      ASSERT_EQ(c.messages[i].role, Role::kUser);
      ASSERT_EQ(c.messages[i + 1].role, Role::kModel);
      check_answer(c.messages[i].content, c.messages[i + 1].content);
      with_reasoning += !c.messages[i + 1].reasoning_content.empty();
      for (int t = 0; t < 5; ++t) per_task[t] += c.messages[i].content.rfind(prefixes[t], 0) == 0;
    }
    EXPECT_TRUE(exchanges == 1 || exchanges == 2);
    two_exchanges += exchanges == 2;
    for (const Message& m : c.messages) {
      for (char ch : m.content + m.reasoning_content) ASSERT_TRUE(ch >= 32 && ch < 127) << m.content;
    }
  }
  // Rough proportions: 1/5 system, 1/6 two exchanges, 1/4 reasoning, tasks even.
  EXPECT_NEAR(with_system / 2000.0, 0.2, 0.04);
  EXPECT_NEAR(two_exchanges / 2000.0, 1.0 / 6, 0.04);
  EXPECT_NEAR(with_reasoning / (2000.0 + two_exchanges), 0.25, 0.04);
  for (int n : per_task) EXPECT_GT(n, 300);
}

// The bundled set is the generator's output. QUILL_UPDATE_DATA=1 rewrites it.
TEST(Synthetic, BundledJsonlMatchesGenerator) {
  std::string path = std::string(QUILL_SOURCE_DIR) + "/" + kSyntheticBundlePath;
  std::string want =
      conversations_to_jsonl(generate_synthetic_conversations(kSyntheticBundleConversations, kSyntheticBundleSeed));
  if (const char* update = std::getenv("QUILL_UPDATE_DATA"); update && std::string(update) == "1") {
    write_file_atomic(path, want);
  }
  std::string got = read_file(path);
  EXPECT_TRUE(got == want) << path << " is out of date: rerun with QUILL_UPDATE_DATA=1";
  EXPECT_LT(got.size(), 1u << 20);
  EXPECT_EQ(std::count(got.begin(), got.end(), '\n'), kSyntheticBundleConversations);
  EXPECT_EQ(conversations_to_jsonl(read_conversations_jsonl(path)), got);
}

TEST(Synthetic, BuildRowsIsByteIdenticalAndConsistent) {
  TempDir a, b;
  nlohmann::json m = build_synthetic_rows(a.str(), 300, 42, 128);
  build_synthetic_rows(b.str(), 300, 42, 128);
  EXPECT_EQ(read_file(a.sub("rows.bin")), read_file(b.sub("rows.bin")));
  EXPECT_EQ(read_file(a.sub("manifest.json")), read_file(b.sub("manifest.json")));

  ByteTokenizer tok;
  EXPECT_EQ(m["tokenizer"]["name"], "quill-byte-v1");
  EXPECT_EQ(m["tokenizer"]["sha256"], tok.definition_sha256());
  EXPECT_EQ(m["tokenizer"]["vocab_size"], 274);
  EXPECT_EQ(m["renderer"], "inkling");
  EXPECT_EQ(m["renderer_version"], kRendererVersion);
  EXPECT_EQ(m["template_kwargs"], nlohmann::json({{"reasoning_effort", "high"}}));
  EXPECT_EQ(m["seed"], 42);
  EXPECT_EQ(m["padding_tokens"], 0);
  EXPECT_EQ(m["row_tokens"], 128);
  EXPECT_EQ(m["conversations"]["input"], 300);
  EXPECT_EQ(m["conversations"]["used"].get<int>() + m["conversations"]["skipped"].get<int>(), 300);
  EXPECT_LT(m["max_token_id"].get<int64_t>(), 274);
  double ratio = m["supervised_token_ratio"];
  EXPECT_GT(ratio, 0.08);
  EXPECT_LT(ratio, 0.5);

  RowsReader r = RowsReader::open(a.str(), true);
  EXPECT_EQ(r.manifest(), m);
  int64_t targets = 0;
  for (int64_t i = 0; i < r.rows(); ++i) {
    EXPECT_GT(r.supervised_targets(i), 0);
    targets += r.supervised_targets(i);
  }
  EXPECT_EQ(m["supervised_targets"], targets);
  EXPECT_DOUBLE_EQ(ratio, static_cast<double>(targets) / (r.rows() * 128.0));
  // Every supervised token sits inside an assistant turn: the decoded text of a row contains the
  // leading <|message_model|> right before each supervised run.
  const uint32_t* t0 = r.tokens(0);
  const uint8_t* m0 = r.mask(0);
  for (int64_t i = 1; i < 128; ++i) {
    if (m0[i] && !m0[i - 1]) {
      EXPECT_EQ(t0[i - 1], tok.special_id("<|message_model|>")) << i;
    }
    if (!m0[i] && m0[i - 1]) {
      EXPECT_EQ(t0[i - 1], tok.special_id("<|content_model_end_sampling|>")) << i;
    }
  }

  TempDir limited;
  nlohmann::json ml = build_synthetic_rows(limited.str(), 300, 42, 128, 5);
  EXPECT_EQ(ml["rows"], 5);
}

}  // namespace
}  // namespace quill
