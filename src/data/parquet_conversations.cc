#include "data/parquet_conversations.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <optional>
#include <set>

#include "base/error.h"
#include "data/build_timing.h"
#include "data/parquet_column.h"
#include "data/parquet_file.h"
#include "base/sha256_stream.h"
#include "data/utf8.h"

namespace quill {

namespace {

constexpr size_t kSkippedErrorsShown = 5;

struct ParquetMessage {
  std::string_view content;
  Role role;
};

// Where a file's conversation columns are and what their definition levels mean (see
// parquet_schema.h): for a level of the content or role leaf,
//   def <  entry - 1   the messages list is null (or a group above it is)
//   def == entry - 1   the list is empty
//   def >= entry       the level is one entry of the list; then
//   def <  message     its message (the struct) is null
//   def <  value       the leaf's value is null
//   def == value       the value is there.
struct MessagesLayout {
  const ParquetLeaf* content = nullptr;
  const ParquetLeaf* role = nullptr;
  const ParquetLeaf* id = nullptr;      // a string column, or not read
  const ParquetLeaf* source = nullptr;  // likewise
  int entry = 0, message = 0, value = 0;
  std::string message_path;  // the struct's dotted path ("messages.list.element")
};

std::string top_level_names(const ParquetFile& f) {
  std::string out;
  std::set<std::string> seen;
  for (const ParquetLeaf& l : f.leaves()) {
    if (seen.insert(l.path.front().name).second) out += (out.empty() ? "" : ", ") + l.path.front().name;
  }
  return out.empty() ? "none" : out;
}

// A top-level string column (id, source) when the file has one; other types are not read.
const ParquetLeaf* optional_string_column(const ParquetFile& f, std::string_view name) {
  const ParquetLeaf* l = f.find_leaf(name);
  return l && l->type == ParquetType::kByteArray && l->max_rep == 0 ? l : nullptr;
}

MessagesLayout messages_layout(const ParquetFile& f) {
  const std::string& path = f.path();
  std::vector<const ParquetLeaf*> leaves = f.leaves_under("messages");
  QUILL_CHECK(!leaves.empty(), "{}: no messages column (the file's columns: {})", path, top_level_names(f));
  QUILL_CHECK(f.leaves_under("tools").empty(),
              "{}: a tools column, which quill does not read from Parquet (the rows would lack the tool "
              "declarations): convert the file to JSONL",
              path);
  MessagesLayout m;
  for (const ParquetLeaf* l : leaves) {
    const std::string& name = l->path.back().name;
    QUILL_CHECK(l->path.size() >= 2 && (name == "content" || name == "role"),
                "{}: column {}: quill reads a message's content and role only (messages must be "
                "list<struct<content: string, role: string>>)",
                path, l->dotted);
    (name == "content" ? m.content : m.role) = l;
  }
  QUILL_CHECK(m.content && m.role && leaves.size() == 2,
              "{}: the messages column must be list<struct<content: string, role: string>> (its columns here: {})",
              path, fmt::join([&] {
                std::vector<std::string> names;
                for (const ParquetLeaf* l : leaves) names.push_back(l->dotted);
                return names;
              }(), ", "));
  for (const ParquetLeaf* l : {m.content, m.role}) {
    QUILL_CHECK(l->type == ParquetType::kByteArray, "{}: column {} is {}, expected strings (BYTE_ARRAY)", path,
                l->dotted, parquet_type_name(l->type));
    QUILL_CHECK(l->max_rep == 1, "{}: column {} is nested {} lists deep; messages must be one list of structs", path,
                l->dotted, l->max_rep);
  }
  const std::vector<ParquetPathNode>& a = m.content->path;
  const std::vector<ParquetPathNode>& b = m.role->path;
  bool same_parent = a.size() == b.size();
  for (size_t i = 0; same_parent && i + 1 < a.size(); ++i) same_parent = a[i].name == b[i].name;
  QUILL_CHECK(same_parent, "{}: columns {} and {} are not fields of one message struct", path, m.content->dotted,
              m.role->dotted);
  size_t r = 0;
  while (a[r].repetition != ParquetRepetition::kRepeated) ++r;  // the one repeated node (max_rep == 1)
  QUILL_CHECK(r + 1 < a.size(), "{}: column {} is a list of strings, expected a list of structs", path,
              m.content->dotted);
  for (size_t i = 0; i + 1 < a.size(); ++i) m.message_path += (i ? "." : "") + a[i].name;
  m.entry = a[r].def_level;
  m.message = a[a.size() - 2].def_level;
  m.value = a.back().def_level;
  m.id = optional_string_column(f, "id");
  m.source = optional_string_column(f, "source");
  return m;
}

// One row group's columns, as decoded.
struct GroupChunks {
  ByteArrayChunk content, role, id, source;
};

}  // namespace

struct ParquetConversations::Block {
  std::vector<ParquetMessage> messages;
  std::vector<size_t> ends;  // per kept conversation: one past its last message
  std::vector<std::string_view> ids, sources;
  std::vector<std::unique_ptr<char[]>> buffers;  // what the views point into
  struct Invalid {
    int64_t row;
    std::string message;
  };
  std::vector<Invalid> invalid;
  int64_t rows = 0;
};

namespace {

using Block = ParquetConversations::Block;

// The values of a top-level string column, one view per row (empty for null). Returns false
// for a row whose value is not UTF-8 (its view is then empty too).
void column_per_row(const ByteArrayChunk& c, const ParquetLeaf& leaf, int64_t rows, const std::string& where,
                    std::vector<std::string_view>& out, std::vector<uint8_t>& bad_utf8) {
  QUILL_CHECK(static_cast<int64_t>(c.def.size()) == rows, "{}: column {} has {} values for {} rows", where,
              leaf.dotted, c.def.size(), rows);
  out.assign(static_cast<size_t>(rows), std::string_view());
  bad_utf8.assign(static_cast<size_t>(rows), 0);
  size_t v = 0;
  for (size_t i = 0; i < c.def.size(); ++i) {
    if (c.def[i] != leaf.max_def) continue;
    std::string_view s = c.values[v++];
    if (is_valid_utf8(s)) out[i] = s;
    else bad_utf8[i] = 1;
  }
}

// Turns one row group's content and role levels into conversations (see MessagesLayout), with
// the checks of the file's structure (both leaves must describe the same lists) and of each
// conversation (an invalid one is recorded in block.invalid, not kept).
void assemble(const ParquetFile& file, size_t g, int64_t first_row, const MessagesLayout& m, GroupChunks& c,
              Block& block) {
  const int64_t rows = file.meta().row_groups[g].num_rows;
  const std::string where = fmt::format("{}: row group {}", file.path(), g);
  std::vector<std::string_view> ids, sources;
  std::vector<uint8_t> bad_id, bad_source;
  if (m.id) column_per_row(c.id, *m.id, rows, where, ids, bad_id);
  if (m.source) column_per_row(c.source, *m.source, rows, where, sources, bad_source);
  const ByteArrayChunk& C = c.content;
  const ByteArrayChunk& R = c.role;
  QUILL_CHECK(C.def.size() == R.def.size(), "{}: corrupt file: columns {} and {} have {} and {} levels", where,
              m.content->dotted, m.role->dotted, C.def.size(), R.def.size());
  const size_t n = C.def.size();
  block.rows = rows;
  block.messages.reserve(n);
  block.ends.reserve(static_cast<size_t>(rows));
  size_t vc = 0, vr = 0;  // the next value of each leaf
  size_t i = 0;
  int64_t row = 0;
  std::string problem;  // the first of the row, if any
  while (i < n) {
    QUILL_CHECK(C.rep[i] == 0, "{}: corrupt file: column {} does not start a row at level {}", where,
                m.content->dotted, i);
    QUILL_CHECK(row < rows, "{}: corrupt file: column {} holds more than the row group's {} rows", where,
                m.content->dotted, rows);
    problem.clear();
    const size_t begin = block.messages.size();
    size_t j = i;
    do {
      QUILL_CHECK(C.rep[j] == R.rep[j] && std::min<int>(C.def[j], m.message) == std::min<int>(R.def[j], m.message),
                  "{}: corrupt file: columns {} and {} disagree about the lists at level {}", where, m.content->dotted,
                  m.role->dotted, j);
      const int dc = C.def[j], dr = R.def[j];
      const size_t index = j - i;  // the message's position in the list
      if (dc < m.entry) {
        QUILL_CHECK(j == i && (j + 1 == n || C.rep[j + 1] == 0),
                    "{}: corrupt file: an empty list continued at level {} of column {}", where, j, m.content->dotted);
        if (dc < m.entry - 1) problem = fmt::format("messages is null (column {})", m.content->path.front().name);
      } else if (dc < m.message) {
        if (problem.empty()) problem = fmt::format("messages[{}] is null (column {})", index, m.message_path);
      } else {
        std::string_view content = dc == m.value ? C.values[vc++] : std::string_view();
        std::string_view role;
        bool has_role = dr == m.value;
        if (has_role) role = R.values[vr++];
        if (problem.empty()) {
          std::optional<Role> parsed = has_role ? parse_role(role) : std::nullopt;
          if (!has_role) {
            problem = fmt::format("messages[{}]: role is null (column {})", index, m.role->dotted);
          } else if (!is_valid_utf8(role)) {
            problem = fmt::format("messages[{}]: the role is not valid UTF-8 (column {})", index, m.role->dotted);
          } else if (!parsed) {
            problem = fmt::format(
                "messages[{}]: unknown role \"{}\" (expected system, developer, user, assistant, model or tool)", index,
                role);
          } else if (size_t bad = find_invalid_utf8(content); bad != kUtf8Valid) {
            problem = fmt::format("messages[{}]: invalid UTF-8 at byte {} of the content (column {})", index, bad + 1,
                                  m.content->dotted);
          } else {
            block.messages.push_back({content, *parsed});
          }
        }
      }
      ++j;
    } while (j < n && C.rep[j] != 0);
    const size_t r = static_cast<size_t>(row);
    if (problem.empty() && m.id && bad_id[r]) problem = fmt::format("the id is not valid UTF-8 (column {})", m.id->dotted);
    if (problem.empty() && m.source && bad_source[r]) {
      problem = fmt::format("the source is not valid UTF-8 (column {})", m.source->dotted);
    }
    if (problem.empty()) {
      block.ends.push_back(block.messages.size());
      if (m.id) block.ids.push_back(ids[r]);
      if (m.source) block.sources.push_back(sources[r]);
    } else {
      block.messages.resize(begin);
      std::string id = m.id && !ids[r].empty() ? fmt::format(" (id {})", ids[r]) : "";
      block.invalid.push_back({first_row + row, fmt::format("{}: row {}{}: {}", file.path(), first_row + row, id, problem)});
    }
    i = j;
    ++row;
  }
  QUILL_CHECK(row == rows, "{}: corrupt file: column {} holds {} rows, the row group {}", where, m.content->dotted, row,
              rows);
  QUILL_CHECK(vc == C.values.size() && vr == R.values.size(),
              "{}: corrupt file: the levels of columns {} / {} call for {} / {} values, the pages hold {} / {}", where,
              m.content->dotted, m.role->dotted, vc, vr, C.values.size(), R.values.size());
  for (ByteArrayChunk* chunk : {&c.content, &c.role, &c.id, &c.source}) {
    for (auto& b : chunk->buffers) block.buffers.push_back(std::move(b));
    *chunk = ByteArrayChunk();  // the levels and value views are no longer needed
  }
}

}  // namespace

ParquetConversations::ParquetConversations() = default;
ParquetConversations::ParquetConversations(ParquetConversations&&) noexcept = default;
ParquetConversations& ParquetConversations::operator=(ParquetConversations&&) noexcept = default;
ParquetConversations::~ParquetConversations() = default;

ParquetConversations ParquetConversations::read(const std::vector<std::string>& paths, ThreadPool& pool,
                                                const ParquetReadOptions& options) {
  QUILL_CHECK(!paths.empty(), "no Parquet file to read");
  ParquetConversations out;
  std::vector<MessagesLayout> layouts;
  // Each row group of each file: where its rows start in the file.
  struct Group {
    size_t file, g;
    int64_t first_row;
  };
  std::vector<Group> groups;
  {
    PhaseTimer t(options.timing, "parquet: open + footers", true);
    for (size_t f = 0; f < paths.size(); ++f) {
      out.open_.push_back(std::make_unique<ParquetFile>(paths[f]));
      const ParquetFile& file = *out.open_.back();
      layouts.push_back(messages_layout(file));
      int64_t row = 0;
      for (size_t g = 0; g < file.row_groups(); ++g) {
        groups.push_back({f, g, row});
        row += file.meta().row_groups[g].num_rows;
      }
      out.files_.push_back({paths[f], static_cast<int64_t>(file.bytes().size()), file.num_rows(),
                            static_cast<int64_t>(file.row_groups())});
      out.rows_ += file.num_rows();
    }
  }

  // Every column chunk of every row group is one task (so that a file of few row groups still
  // keeps every thread busy); the hash of the files, which is serial, is one more, taken first.
  std::vector<GroupChunks> chunks(groups.size());
  struct ChunkTask {
    size_t group;
    const ParquetLeaf* leaf;
    ByteArrayChunk* slot;
  };
  std::vector<ChunkTask> tasks;
  for (size_t k = 0; k < groups.size(); ++k) {
    const MessagesLayout& m = layouts[groups[k].file];
    tasks.push_back({k, m.content, &chunks[k].content});
    tasks.push_back({k, m.role, &chunks[k].role});
    if (m.id) tasks.push_back({k, m.id, &chunks[k].id});
    if (m.source) tasks.push_back({k, m.source, &chunks[k].source});
  }
  const size_t hash_tasks = options.sha256 ? 1 : 0;
  {
    PhaseTimer t(options.timing, "parquet: read columns (+ sha256)", false);
    pool.parallel_for(hash_tasks + tasks.size(), [&](size_t i) {
      if (i < hash_tasks) {
        Sha256 sha;
        for (const auto& file : out.open_) sha.update(file->bytes().data(), file->bytes().size());
        out.sha256_ = sha.hex();
        return;
      }
      const ChunkTask& task = tasks[i - hash_tasks];
      const Group& group = groups[task.group];
      PageDecompressor decompressor;
      *task.slot = read_byte_array_chunk(*out.open_[group.file], group.g, *task.leaf, decompressor);
    });
  }
  {
    PhaseTimer t(options.timing, "parquet: assemble conversations", false);
    out.blocks_.resize(groups.size());
    pool.parallel_for(groups.size(), [&](size_t k) {
      out.blocks_[k] = std::make_unique<Block>();
      const Group& group = groups[k];
      assemble(*out.open_[group.file], group.g, group.first_row, layouts[group.file], chunks[k], *out.blocks_[k]);
    });
  }

  PhaseTimer t(options.timing, "parquet: index conversations", true);  // O(row groups)
  for (const auto& b : out.blocks_) {
    out.block_start_.push_back(out.total_);
    out.total_ += static_cast<int64_t>(b->ends.size());
    for (const Block::Invalid& e : b->invalid) {
      QUILL_CHECK(options.skip_invalid, "{}", e.message);  // the first invalid row of the first file that has one
      if (out.skipped_errors_.size() < kSkippedErrorsShown) out.skipped_errors_.push_back(e.message);
    }
  }
  return out;
}

std::pair<const ParquetConversations::Block*, size_t> ParquetConversations::locate(int64_t k) const {
  QUILL_CHECK(k >= 0 && k < total_, "conversation {} of {}", k, total_);
  // The last block starting at or before k (blocks without conversations share a start).
  auto it = std::upper_bound(block_start_.begin(), block_start_.end(), k) - 1;
  size_t b = static_cast<size_t>(it - block_start_.begin());
  return {blocks_[b].get(), static_cast<size_t>(k - *it)};
}

void ParquetConversations::fill(int64_t k, Conversation& out) const {
  auto [block, i] = locate(k);
  size_t begin = i == 0 ? 0 : block->ends[i - 1], end = block->ends[i];
  out.messages.resize(end - begin);
  for (size_t j = begin; j < end; ++j) {
    Message& m = out.messages[j - begin];
    m.role = block->messages[j].role;
    m.content.assign(block->messages[j].content);
    m.reasoning_content.clear();
    m.tool_calls.clear();
    m.name.clear();
    m.tool_call_id.clear();
  }
  if (!out.tools.is_array() || !out.tools.empty()) out.tools = nlohmann::json::array();
}

Conversation ParquetConversations::conversation(int64_t k) const {
  Conversation c;
  fill(k, c);
  return c;
}

std::string_view ParquetConversations::id(int64_t k) const {
  auto [block, i] = locate(k);
  return block->ids.empty() ? std::string_view() : block->ids[i];
}

std::string_view ParquetConversations::source(int64_t k) const {
  auto [block, i] = locate(k);
  return block->sources.empty() ? std::string_view() : block->sources[i];
}

int64_t ParquetConversations::content_bytes(int64_t k) const {
  auto [block, i] = locate(k);
  size_t begin = i == 0 ? 0 : block->ends[i - 1], end = block->ends[i];
  int64_t bytes = 0;
  for (size_t j = begin; j < end; ++j) bytes += static_cast<int64_t>(block->messages[j].content.size());
  return bytes;
}

int64_t ParquetConversations::bytes() const {
  int64_t b = 0;
  for (const ParquetFileSummary& f : files_) b += f.bytes;
  return b;
}

}  // namespace quill
