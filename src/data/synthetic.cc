#include "data/synthetic.h"

#include <algorithm>

#include "base/error.h"
#include "base/rng.h"
#include "data/build_rows.h"
#include "data/byte_tokenizer.h"

namespace quill {

namespace {

struct Exchange {
  std::string prompt, answer, reasoning;
};

std::string letters(SplitMix64& rng) {
  std::string s(rng.below(6) + 3, ' ');
  for (char& c : s) c = static_cast<char>('a' + rng.below(26));
  return s;
}

std::vector<int> numbers(SplitMix64& rng, uint64_t bound) {
  std::vector<int> v(rng.below(4) + 3);
  for (int& x : v) x = static_cast<int>(rng.below(bound));
  return v;
}

std::string join(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? " " : "") + std::to_string(v[i]);
  return s;
}

Exchange reverse_task(SplitMix64& rng) {
  std::string s = letters(rng);
  return {"reverse: " + s, std::string(s.rbegin(), s.rend()), "Read " + s + " from the last letter."};
}

Exchange upper_task(SplitMix64& rng) {
  std::string s = letters(rng), up = s;
  for (char& c : up) c = static_cast<char>(c - 'a' + 'A');
  return {"upper: " + s, up, "Capitalize every letter of " + s + "."};
}

Exchange sort_task(SplitMix64& rng) {
  std::vector<int> v = numbers(rng, 10), sorted = v;
  std::sort(sorted.begin(), sorted.end());
  return {"sort: " + join(v), join(sorted), "Put the smallest digit first."};
}

Exchange add_task(SplitMix64& rng) {
  int a = static_cast<int>(rng.below(100));
  int b = static_cast<int>(rng.below(100));
  std::string sum = std::to_string(a + b);
  return {"add " + std::to_string(a) + " " + std::to_string(b), sum,
          std::to_string(a) + " + " + std::to_string(b) + " = " + sum + "."};
}

Exchange max_task(SplitMix64& rng) {
  std::vector<int> v = numbers(rng, 100);
  std::string top = std::to_string(*std::max_element(v.begin(), v.end()));
  return {"max: " + join(v), top, "The largest of " + join(v) + " is " + top + "."};
}

using TaskFn = Exchange (*)(SplitMix64&);
constexpr TaskFn kTasks[] = {reverse_task, upper_task, sort_task, add_task, max_task};

}  // namespace

std::vector<Conversation> generate_synthetic_conversations(int64_t n, uint64_t seed) {
  QUILL_CHECK(n >= 0, "synthetic: negative conversation count {}", n);
  SplitMix64 rng(seed);
  std::vector<Conversation> out;
  out.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    Conversation c;
    if (rng.below(5) == 0) {
      c.messages.push_back({Role::kSystem, std::string(kSyntheticSystemPrompts[rng.below(3)]), {}, {}, {}, {}});
    }
    int exchanges = rng.below(6) == 0 ? 2 : 1;
    for (int e = 0; e < exchanges; ++e) {
      Exchange x = kTasks[rng.below(std::size(kTasks))](rng);
      bool think = rng.below(4) == 0;
      c.messages.push_back({Role::kUser, x.prompt, {}, {}, {}, {}});
      c.messages.push_back({Role::kModel, x.answer, think ? x.reasoning : std::string(), {}, {}, {}});
    }
    out.push_back(std::move(c));
  }
  return out;
}

nlohmann::json build_synthetic_rows(const std::string& out_dir, int64_t n_conversations, uint64_t seed,
                                    int64_t row_tokens, int64_t max_rows, double valid_fraction) {
  ByteTokenizer tokenizer;
  BuildOptions options;
  options.seed = seed;
  options.row_tokens = row_tokens;
  options.max_rows = max_rows;
  options.valid_fraction = valid_fraction;
  options.source = "quill synthetic tasks (src/data/synthetic.h): " + std::to_string(n_conversations) +
                   " conversations generated with seed " + std::to_string(seed);
  return build_rows(generate_synthetic_conversations(n_conversations, seed), tokenizer, options, out_dir);
}

}  // namespace quill
