#include "data/build_rows.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <functional>
#include <mutex>
#include <optional>

#include "base/error.h"
#include "data/chat_render.h"
#include "data/packing.h"
#include "data/parallel.h"
#include "data/progress.h"
#include "data/rows.h"
#include "data/utf8.h"

namespace quill {

namespace {

// A read-only memory map of a whole file (empty files map to nothing).
class MappedFile {
 public:
  explicit MappedFile(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY);
    QUILL_CHECK(fd >= 0, "{}: cannot open ({})", path, std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      int err = errno;
      ::close(fd);
      QUILL_FAIL("{}: cannot stat ({})", path, std::strerror(err));
    }
    size_ = static_cast<size_t>(st.st_size);
    if (size_ > 0) {
      void* m = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      int err = errno;
      ::close(fd);
      QUILL_CHECK(m != MAP_FAILED, "{}: mmap failed ({})", path, std::strerror(err));
      data_ = static_cast<const char*>(m);
      ::madvise(m, size_, MADV_WILLNEED);
    } else {
      ::close(fd);
    }
  }
  ~MappedFile() {
    if (data_) ::munmap(const_cast<char*>(data_), size_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  std::string_view view() const { return {data_, size_}; }

 private:
  const char* data_ = nullptr;
  size_t size_ = 0;
};

struct Line {
  size_t offset;
  size_t length;
  int64_t number;  // 1-based
};

// Renders conversation k (an index before the permutation) and reports its input bytes.
using RenderFn = std::function<MaskedTokens(int64_t k)>;
using BytesFn = std::function<int64_t(int64_t k)>;

nlohmann::json run_build(int64_t n, const RenderFn& render, const BytesFn& bytes, const ChatRenderer& renderer,
                         const BuildOptions& options, const std::string& out_dir, nlohmann::json extras,
                         ThreadPool& pool) {
  const Tokenizer& tokenizer = renderer.tokenizer();
  nlohmann::json tok = {{"name", tokenizer.name()}, {"sha256", tokenizer.definition_sha256()},
                        {"vocab_size", tokenizer.vocab_size()}};
  if (options.tokenizer_source.is_object()) tok.update(options.tokenizer_source);
  extras["tokenizer"] = tok;
  extras["renderer"] = kRendererName;
  extras["renderer_version"] = kRendererVersion;
  extras["template_kwargs"] = renderer.template_kwargs();
  extras["source"] = options.source;
  extras["seed"] = options.seed;
  extras["max_rows"] = options.max_rows;

  BuildTiming* timing = options.timing;
  PackOptions pack{options.seed, options.row_tokens, options.max_rows};
  RowsWriter writer(out_dir, options.row_tokens);
  writer.set_timing(timing);
  RowPacker packer(pack, writer, n);
  PhaseTimer perm_timer(timing, "permutation", true);
  std::vector<int64_t> perm = fisher_yates_permutation(n, options.seed);
  perm_timer.stop();
  const size_t batch = static_cast<size_t>(std::max(512, pool.threads() * 128));
  std::vector<MaskedTokens> slots;
  Progress progress("data build: rendering", options.progress);
  int64_t rendered = 0, bytes_done = 0;
  for (size_t start = 0; start < perm.size() && !packer.done(); start += batch) {
    size_t count = std::min(batch, perm.size() - start);
    PhaseTimer free_timer(timing, "free rendered conversations", true);
    slots.assign(count, MaskedTokens{});
    free_timer.stop();
    PhaseTimer render_timer(timing, "parse + render + tokenize", false);
    pool.parallel_for(count, [&](size_t i) { slots[i] = render(perm[start + i]); });
    render_timer.stop();
    PhaseTimer pack_timer(timing, "pack + write rows + sha256", true);
    for (size_t i = 0; i < count && !packer.done(); ++i) {
      packer.add(slots[i], perm[start + i]);
      ++rendered;
      bytes_done += bytes(perm[start + i]);
    }
    pack_timer.stop();
    if (packer.done() || start + count >= perm.size()) break;  // the final line follows
    std::string rows = fmt::format("rows {}", packer.rows());
    if (options.max_rows > 0) {
      progress.update(packer.rows(), options.max_rows, bytes_done, fmt::format("conversations {}/{}", rendered, n));
    } else {
      progress.update(rendered, n, bytes_done, rows);
    }
  }
  PhaseTimer finish_timer(timing, "finish (mask section, fsync, manifest)", true);
  PackStats stats = packer.finish();
  progress.update(options.max_rows > 0 ? stats.rows : rendered, options.max_rows > 0 ? options.max_rows : n, bytes_done,
                  fmt::format("rows {}", stats.rows), /*force=*/true);
  progress.finish();
  QUILL_CHECK(stats.rows > 0,
              "{}: no rows: {} conversations give {} tokens, which make no row of {} tokens with a supervised target",
              out_dir, stats.conversations, stats.stream_tokens, options.row_tokens);
  int64_t invalid = extras.value("invalid_skipped", int64_t{0});
  extras.erase("invalid_skipped");
  extras.update(stats.to_manifest());
  extras["conversations"]["invalid_skipped"] = invalid;
  return writer.finish(extras);
}

}  // namespace

Conversation parse_conversation_line(std::string_view line, const std::string& where) {
  size_t bad = find_invalid_utf8(line);
  QUILL_CHECK(bad == kUtf8Valid, "{}: invalid UTF-8 at byte {} of the line", where, bad + 1);
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
  Conversation c = conversation_from_json(j, where);
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
  std::optional<TimedTokenizer> timed;
  if (options.timing) timed.emplace(tokenizer, *options.timing);
  ChatRenderer renderer(timed ? *timed : tokenizer, RenderOptions{options.reasoning_effort});
  auto render = [&](int64_t k) {
    WorkTimer t(options.timing, BuildTiming::kRender);
    return renderer.render(conversations[k]);
  };
  auto bytes = [&](int64_t k) {
    int64_t b = 0;
    for (const Message& m : conversations[k].messages) b += static_cast<int64_t>(m.content.size() + m.reasoning_content.size());
    return b;
  };
  ThreadPool pool(options.threads);
  return run_build(static_cast<int64_t>(conversations.size()), render, bytes, renderer, options, out_dir,
                   {{"invalid_skipped", 0}}, pool);
}

nlohmann::json build_rows_from_jsonl(const std::string& path, const Tokenizer& tokenizer, const BuildOptions& options,
                                     const std::string& out_dir) {
  BuildTiming* timing = options.timing;
  std::optional<TimedTokenizer> timed;
  if (timing) timed.emplace(tokenizer, *timing);
  ChatRenderer renderer(timed ? *timed : tokenizer, RenderOptions{options.reasoning_effort});  // checks the effort first
  PhaseTimer split_timer(timing, "map + split lines", true);
  MappedFile file(path);
  std::string_view text = file.view();

  // Every non-blank line, in order.
  std::vector<Line> lines;
  int64_t number = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    ++number;
    std::string_view line = text.substr(pos, eol - pos);
    if (line.find_first_not_of(" \t\r") != std::string_view::npos) lines.push_back({pos, line.size(), number});
    pos = eol + 1;
  }
  split_timer.stop();
  auto line_text = [&](const Line& l) { return text.substr(l.offset, l.length); };
  auto where = [&](const Line& l) { return fmt::format("{}:{}", path, l.number); };

  // Pass 1: check every line. Chunks of lines in parallel; inside a chunk in order, so the first
  // error thrown by the lowest chunk is the first bad line of the file.
  constexpr size_t kChunk = 256;
  size_t chunks = (lines.size() + kChunk - 1) / kChunk;
  std::vector<uint8_t> ok(lines.size(), 0);
  std::vector<std::vector<std::string>> chunk_errors(chunks);
  Progress check("data build: checking lines", options.progress);
  std::atomic<int64_t> checked_bytes{0};
  std::atomic<size_t> checked_chunks{0};
  std::mutex progress_mu;
  ThreadPool pool(options.threads);
  PhaseTimer check_timer(timing, "check lines (parse + validate)", false);
  pool.parallel_for(chunks, [&](size_t c) {
    size_t end = std::min(lines.size(), (c + 1) * kChunk);
    int64_t b = 0;
    for (size_t i = c * kChunk; i < end; ++i) {
      try {
        WorkTimer t(timing, BuildTiming::kParse);
        parse_conversation_line(line_text(lines[i]), where(lines[i]));
        ok[i] = 1;
      } catch (const Error& e) {
        if (!options.skip_invalid) throw;
        chunk_errors[c].push_back(e.what());
      }
      b += static_cast<int64_t>(lines[i].length);
    }
    checked_bytes += b;
    size_t done = ++checked_chunks;
    std::unique_lock<std::mutex> lock(progress_mu, std::try_to_lock);
    if (lock.owns_lock()) {
      check.update(static_cast<int64_t>(std::min(lines.size(), done * kChunk)), static_cast<int64_t>(lines.size()),
                   checked_bytes.load());
    }
  });
  check.finish();
  check_timer.stop();

  PhaseTimer valid_timer(timing, "collect valid lines", true);
  std::vector<int64_t> valid;  // conversation k -> index into lines
  for (size_t i = 0; i < lines.size(); ++i) {
    if (ok[i]) valid.push_back(static_cast<int64_t>(i));
  }
  int64_t invalid = static_cast<int64_t>(lines.size() - valid.size());
  if (invalid > 0) {
    int shown = 0;
    for (const auto& errs : chunk_errors) {
      for (const std::string& e : errs) {
        if (shown++ < 5) std::fprintf(stderr, "quill: skipped %s\n", e.c_str());
      }
    }
    std::fprintf(stderr, "quill: skipped %lld invalid line(s) of %zu\n", static_cast<long long>(invalid), lines.size());
  }
  QUILL_CHECK(!valid.empty(), "{}: no valid conversation ({} non-blank lines)", path, lines.size());
  valid_timer.stop();

  auto render = [&](int64_t k) {
    const Line& l = lines[valid[k]];
    Conversation c;
    {
      WorkTimer t(timing, BuildTiming::kParse);
      c = parse_conversation_line(line_text(l), where(l));
    }
    WorkTimer t(timing, BuildTiming::kRender);
    return renderer.render(c);
  };
  auto bytes = [&](int64_t k) { return static_cast<int64_t>(lines[valid[k]].length); };
  nlohmann::json extras = {{"invalid_skipped", invalid},
                           {"input", {{"path", path}, {"bytes", text.size()}, {"lines", number}}}};
  return run_build(static_cast<int64_t>(valid.size()), render, bytes, renderer, options, out_dir, extras, pool);
}

}  // namespace quill
