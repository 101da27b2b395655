#include "data/build_rows.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <optional>

#include "base/error.h"
#include "data/chat_render.h"
#include "data/conversation_fast.h"
#include "data/jsonl_lines.h"
#include "data/mapped_file.h"
#include "base/thread_pool.h"
#include "base/progress.h"
#include "data/rows_pipeline.h"
#include "data/timed_renderer.h"
#include "data/utf8.h"

namespace quill {

namespace {

// Thrown (never past this file) when the single pass meets an invalid line: the build starts
// over with the two passes. Not a quill::Error, so nothing between mistakes it for a failure.
struct InvalidLineSeen {};

}  // namespace

namespace {

// The general path's JSON of a line; errors name `where`.
nlohmann::json json_of_line(std::string_view line, const std::string& where) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line);
  } catch (const nlohmann::json::parse_error& e) {
    // nlohmann quotes everything it read up to the error; keep the message to one screen line.
    std::string what = e.what();
    if (what.size() > 200) {
      size_t cut = 200;
      while (cut > 0 && (static_cast<unsigned char>(what[cut]) & 0xC0) == 0x80) --cut;
      what = what.substr(0, cut) + "...";
    }
    QUILL_FAIL("{}: malformed JSON ({})", where, what);
  }
  return j;
}

}  // namespace

Conversation parse_conversation_line(std::string_view line, const std::string& where) {
  size_t bad = find_invalid_utf8(line);
  QUILL_CHECK(bad == kUtf8Valid, "{}: invalid UTF-8 at byte {} of the line", where, bad + 1);
  std::optional<Conversation> fast = parse_conversation_fast(line);
  Conversation c = fast ? std::move(*fast) : conversation_from_json(json_of_line(line, where), where);
  if (!c.tools.empty()) {
    try {
      tool_declare_json(c.tools);
    } catch (const Error& e) {
      QUILL_FAIL("{}: {}", where, e.what());
    }
  }
  return c;
}

nlohmann::json build_rows(const std::vector<Conversation>& conversations, const Tokenizer& tokenizer,
                          const BuildOptions& options, const std::string& out_dir) {
  TimedRenderer r(tokenizer, options);
  RowsSource source;
  source.conversations = static_cast<int64_t>(conversations.size());
  source.render = [&](int64_t k, MaskedTokens& out) {
    WorkTimer t(options.timing, BuildTiming::kRender);
    r.renderer.render_into(conversations[k], out);
  };
  source.bytes = [&](int64_t k) {
    int64_t b = 0;
    for (const Message& m : conversations[k].messages) b += static_cast<int64_t>(m.content.size() + m.reasoning_content.size());
    return b;
  };
  ThreadPool pool(options.threads);
  return build_rows_from_source(source, r.renderer, options, out_dir, {{"invalid_skipped", 0}}, pool);
}

namespace {

// A JSONL build: the mapped file, its lines and what renders them.
class JsonlBuild {
 public:
  JsonlBuild(const std::string& path, const ChatRenderer& renderer, const BuildOptions& options, ThreadPool& pool)
      : path_(path), renderer_(renderer), options_(options), timing_(options.timing), pool_(pool), file_(path) {
    PhaseTimer t(timing_, "map + split lines", false);
    text_ = file_.view();
    split_ = split_jsonl_lines(text_, pool_);
  }

  // The single pass: every line is taken for valid and parsed only as it is rendered; the lines
  // a --max-rows build never renders are checked before its rows are finished. Nothing (no
  // rows, no temporaries) when a line is invalid: the two passes then report or skip it.
  std::optional<nlohmann::json> single_pass(const std::string& out_dir) {
    if (lines().empty()) return std::nullopt;
    std::atomic<bool> invalid{false};
    RowsSource source;
    source.conversations = static_cast<int64_t>(lines().size());
    source.render = [&](int64_t k, MaskedTokens& out) {
      if (!render(lines()[k], out)) invalid.store(true, std::memory_order_relaxed);
    };
    source.bytes = [&](int64_t k) { return static_cast<int64_t>(lines()[k].length); };
    source.after_window = [&] {
      if (invalid.load()) throw InvalidLineSeen{};
    };
    source.before_finish = [&](std::span<const int64_t> unrendered) {
      if (!all_valid(unrendered)) throw InvalidLineSeen{};
    };
    try {
      return build_rows_from_source(source, renderer_, options_, out_dir, extras(0), pool_);
    } catch (const InvalidLineSeen&) {
      if (options_.progress) std::fprintf(stderr, "quill: an invalid line: checking every line first\n");
      return std::nullopt;
    }
  }

  // Pass 1 checks every line; pass 2 renders the valid ones, parsing them again.
  nlohmann::json two_passes(const std::string& out_dir) {
    int64_t invalid = 0;
    std::vector<int64_t> valid = check_every_line(invalid);  // conversation k -> index into lines
    RowsSource source;
    source.conversations = static_cast<int64_t>(valid.size());
    source.render = [&](int64_t k, MaskedTokens& out) { render(lines()[valid[k]], out); };
    source.bytes = [&](int64_t k) { return static_cast<int64_t>(lines()[valid[k]].length); };
    return build_rows_from_source(source, renderer_, options_, out_dir, extras(invalid), pool_);
  }

 private:
  const std::vector<JsonlLine>& lines() const { return split_.lines; }
  std::string where(const JsonlLine& l) const { return fmt::format("{}:{}", path_, l.number); }
  Conversation parse(const JsonlLine& l) const {
    WorkTimer t(timing_, BuildTiming::kParse);
    return parse_conversation_line(text_.substr(l.offset, l.length), where(l));
  }
  // Parses and renders a line; false (and `out` empty) when the line is invalid.
  bool render(const JsonlLine& l, MaskedTokens& out) const {
    Conversation c;
    try {
      c = parse(l);
    } catch (const Error&) {
      out.tokens.clear();
      out.mask.clear();
      return false;
    }
    WorkTimer t(timing_, BuildTiming::kRender);
    renderer_.render_into(c, out);
    return true;
  }
  nlohmann::json extras(int64_t invalid) const {
    return {{"invalid_skipped", invalid}, {"input", {{"path", path_}, {"bytes", text_.size()}, {"lines", split_.total}}}};
  }

  // Whether the lines `indices` are all valid; checked in parallel, stopping at the first
  // invalid one found.
  bool all_valid(std::span<const int64_t> indices) {
    if (indices.empty()) return true;
    PhaseTimer t(timing_, "check lines never rendered", false);
    Progress progress("data build: checking the lines not needed", ProgressOptions::counting(options_.progress, "lines"));
    constexpr size_t kChunk = 256;
    std::atomic<bool> invalid{false};
    std::atomic<size_t> done{0};
    std::atomic<int64_t> bytes{0};
    std::mutex progress_mu;
    pool_.parallel_for((indices.size() + kChunk - 1) / kChunk, [&](size_t c) {
      int64_t b = 0;
      for (size_t i = c * kChunk; i < std::min(indices.size(), (c + 1) * kChunk) && !invalid.load(); ++i) {
        try {
          parse(lines()[indices[i]]);
        } catch (const Error&) {
          invalid.store(true, std::memory_order_relaxed);
        }
        b += static_cast<int64_t>(lines()[indices[i]].length);
      }
      size_t d = done += kChunk;
      int64_t total_bytes = bytes += b;
      std::unique_lock<std::mutex> lock(progress_mu, std::try_to_lock);
      if (lock.owns_lock()) {
        progress.set_bytes(total_bytes);
        progress.update(static_cast<int64_t>(std::min(d, indices.size())), static_cast<int64_t>(indices.size()));
      }
    });
    if (!invalid.load()) {
      progress.set_bytes(bytes.load());
      progress.update(static_cast<int64_t>(indices.size()), static_cast<int64_t>(indices.size()));
    }
    progress.finish();
    return !invalid.load();
  }

  // Every line checked; returns the valid ones and counts the others. Chunks of lines in
  // parallel; inside a chunk in order, so the first error thrown by the lowest chunk is the
  // first bad line of the file. With skip_invalid, the first few errors are printed instead.
  std::vector<int64_t> check_every_line(int64_t& invalid) {
    const std::vector<JsonlLine>& ls = lines();
    constexpr size_t kChunk = 256;
    size_t chunks = (ls.size() + kChunk - 1) / kChunk;
    std::vector<uint8_t> ok(ls.size(), 0);
    std::vector<std::vector<std::string>> chunk_errors(chunks);
    Progress check("data build: checking lines", ProgressOptions::counting(options_.progress, "lines"));
    std::atomic<int64_t> checked_bytes{0};
    std::atomic<size_t> checked_chunks{0};
    std::mutex progress_mu;
    PhaseTimer check_timer(timing_, "check lines (parse + validate)", false);
    pool_.parallel_for(chunks, [&](size_t c) {
      size_t end = std::min(ls.size(), (c + 1) * kChunk);
      int64_t b = 0;
      for (size_t i = c * kChunk; i < end; ++i) {
        try {
          parse(ls[i]);
          ok[i] = 1;
        } catch (const Error& e) {
          if (!options_.skip_invalid) throw;
          chunk_errors[c].push_back(e.what());
        }
        b += static_cast<int64_t>(ls[i].length);
      }
      checked_bytes += b;
      size_t done = ++checked_chunks;
      std::unique_lock<std::mutex> lock(progress_mu, std::try_to_lock);
      if (lock.owns_lock()) {
        check.set_bytes(checked_bytes.load());
        check.update(static_cast<int64_t>(std::min(ls.size(), done * kChunk)), static_cast<int64_t>(ls.size()));
      }
    });
    check.finish();
    check_timer.stop();

    PhaseTimer valid_timer(timing_, "collect valid lines", true);
    std::vector<int64_t> valid;
    for (size_t i = 0; i < ls.size(); ++i) {
      if (ok[i]) valid.push_back(static_cast<int64_t>(i));
    }
    invalid = static_cast<int64_t>(ls.size() - valid.size());
    if (invalid > 0) {
      int shown = 0;
      for (const auto& errs : chunk_errors) {
        for (const std::string& e : errs) {
          if (shown++ < 5) std::fprintf(stderr, "quill: skipped %s\n", e.c_str());
        }
      }
      std::fprintf(stderr, "quill: skipped %lld invalid line(s) of %zu\n", static_cast<long long>(invalid), ls.size());
    }
    QUILL_CHECK(!valid.empty(), "{}: no valid conversation ({} non-blank lines)", path_, ls.size());
    return valid;
  }

  const std::string& path_;
  const ChatRenderer& renderer_;
  const BuildOptions& options_;
  BuildTiming* timing_;
  ThreadPool& pool_;
  MappedFile file_;
  std::string_view text_;
  JsonlLines split_;
};

}  // namespace

nlohmann::json build_rows_from_jsonl(const std::string& path, const Tokenizer& tokenizer, const BuildOptions& options,
                                     const std::string& out_dir) {
  TimedRenderer r(tokenizer, options);  // checks the effort first
  ThreadPool pool(options.threads);
  JsonlBuild build(path, r.renderer, options, pool);
  if (std::optional<nlohmann::json> manifest = build.single_pass(out_dir)) return *manifest;
  return build.two_passes(out_dir);
}

}  // namespace quill
