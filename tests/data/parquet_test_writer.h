// Test-only: small Parquet files of conversations written from scratch, for the rows pyarrow's
// fixtures do not have (null lists, null messages, null roles and contents, unknown roles,
// invalid UTF-8). The shape is pyarrow's for list<struct<content, role>> (parquet-format
// LogicalTypes.md, "Lists"):
//   optional binary id (UTF8);
//   optional group messages (LIST) { repeated group list { optional group element {
//     optional binary content (UTF8); optional binary role (UTF8); } } }
// One row group per `rows_per_group` rows; uncompressed data pages v1 of at most
// `levels_per_page` levels each (so a page may begin inside a row, as v1 allows); PLAIN values;
// levels as RLE runs.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "thrift_test_tree.h"

namespace quill::test {

struct TestMessage {
  std::optional<std::string> content, role;
};
struct TestRow {
  std::optional<std::string> id;
  std::optional<std::vector<std::optional<TestMessage>>> messages;  // nullopt: a null list
};

namespace parquet_writer_detail {

using N = ThriftNode;

// A column chunk's levels and non-null values.
struct Leaf {
  std::vector<uint8_t> rep, def;
  std::vector<std::string> values;
};

inline void put_u32(std::string& out, uint32_t v) {
  for (int b = 0; b < 4; ++b) out += static_cast<char>((v >> (8 * b)) & 0xFF);
}

// Levels as RLE runs (one byte per value: bit width <= 8), prefixed with their length (v1).
inline std::string rle_levels(const std::vector<uint8_t>& levels) {
  std::string runs;
  for (size_t i = 0; i < levels.size();) {
    size_t j = i;
    while (j < levels.size() && levels[j] == levels[i]) ++j;
    thrift_detail::put_varint(runs, static_cast<uint64_t>(j - i) << 1);
    runs += static_cast<char>(levels[i]);
    i = j;
  }
  std::string out;
  put_u32(out, static_cast<uint32_t>(runs.size()));
  return out + runs;
}

inline N schema_element(const std::string& name, std::optional<int> type, std::optional<int> repetition,
                        std::optional<int> children, std::optional<int> converted) {
  std::vector<std::pair<int16_t, N>> f;
  if (type) f.emplace_back(1, N::i32(*type));
  if (repetition) f.emplace_back(3, N::i32(*repetition));
  f.emplace_back(4, N::binary(name));
  if (children) f.emplace_back(5, N::i32(*children));
  if (converted) f.emplace_back(6, N::i32(*converted));
  return N::strukt(std::move(f));
}

}  // namespace parquet_writer_detail

inline std::string write_test_parquet(const std::vector<TestRow>& rows, size_t rows_per_group = 1000,
                                      size_t levels_per_page = SIZE_MAX) {
  using namespace parquet_writer_detail;
  const std::vector<std::vector<std::string>> paths = {
      {"id"}, {"messages", "list", "element", "content"}, {"messages", "list", "element", "role"}};
  std::string file = "PAR1";
  std::vector<N> row_groups;
  for (size_t start = 0; start < rows.size() || (start == 0 && rows.empty()); start += rows_per_group) {
    size_t end = std::min(rows.size(), start + rows_per_group);
    Leaf leaves[3];
    for (size_t r = start; r < end; ++r) {
      const TestRow& row = rows[r];
      leaves[0].rep.push_back(0);
      leaves[0].def.push_back(row.id ? 1 : 0);
      if (row.id) leaves[0].values.push_back(*row.id);
      for (int c = 1; c <= 2; ++c) {
        Leaf& l = leaves[c];
        if (!row.messages || row.messages->empty()) {
          l.rep.push_back(0);
          l.def.push_back(row.messages ? 1 : 0);
          continue;
        }
        for (size_t j = 0; j < row.messages->size(); ++j) {
          const auto& m = (*row.messages)[j];
          l.rep.push_back(j == 0 ? 0 : 1);
          const std::optional<std::string>* v = m ? (c == 1 ? &m->content : &m->role) : nullptr;
          l.def.push_back(!m ? 2 : !v->has_value() ? 3 : 4);
          if (m && v->has_value()) l.values.push_back(**v);
        }
      }
    }
    std::vector<N> columns;
    int64_t group_bytes = 0;
    for (int c = 0; c < 3; ++c) {
      const Leaf& l = leaves[c];
      int64_t offset = static_cast<int64_t>(file.size());
      size_t value = 0;
      for (size_t first = 0; first < l.def.size() || first == 0; first += levels_per_page) {
        size_t last = std::min(l.def.size(), first + std::min(levels_per_page, l.def.size() - first));
        std::vector<uint8_t> rep(l.rep.begin() + first, l.rep.begin() + last);
        std::vector<uint8_t> def(l.def.begin() + first, l.def.begin() + last);
        std::string page = c == 0 ? "" : rle_levels(rep);
        page += rle_levels(def);
        for (uint8_t d : def) {
          if (d != (c == 0 ? 1 : 4)) continue;
          put_u32(page, static_cast<uint32_t>(l.values[value].size()));
          page += l.values[value++];
        }
        N header = N::strukt({{1, N::i32(0)},
                              {2, N::i32(static_cast<int64_t>(page.size()))},
                              {3, N::i32(static_cast<int64_t>(page.size()))},
                              {5, N::strukt({{1, N::i32(static_cast<int64_t>(def.size()))},
                                             {2, N::i32(0)},
                                             {3, N::i32(3)},
                                             {4, N::i32(3)}})}});
        file += thrift_encode(header) + page;
        if (l.def.empty()) break;
      }
      int64_t chunk_bytes = static_cast<int64_t>(file.size()) - offset;
      group_bytes += chunk_bytes;
      std::vector<N> path;
      for (const std::string& p : paths[c]) path.push_back(N::binary(p));
      N meta = N::strukt({{1, N::i32(6)},
                          {2, N::list(N::kI32, {N::i32(0), N::i32(3)})},
                          {3, N::list(N::kBinary, path)},
                          {4, N::i32(0)},
                          {5, N::i64(static_cast<int64_t>(l.def.size()))},
                          {6, N::i64(chunk_bytes)},
                          {7, N::i64(chunk_bytes)},
                          {9, N::i64(offset)}});
      columns.push_back(N::strukt({{2, N::i64(offset)}, {3, meta}}));
    }
    row_groups.push_back(N::strukt({{1, N::list(N::kStruct, columns)},
                                    {2, N::i64(group_bytes)},
                                    {3, N::i64(static_cast<int64_t>(end - start))}}));
    if (rows.empty()) break;
  }
  // Repetition 0 required, 1 optional, 2 repeated; converted type 0 UTF8, 3 LIST; type 6 BYTE_ARRAY.
  std::vector<N> schema = {schema_element("schema", std::nullopt, std::nullopt, 2, std::nullopt),
                           schema_element("id", 6, 1, std::nullopt, 0),
                           schema_element("messages", std::nullopt, 1, 1, 3),
                           schema_element("list", std::nullopt, 2, 1, std::nullopt),
                           schema_element("element", std::nullopt, 1, 2, std::nullopt),
                           schema_element("content", 6, 1, std::nullopt, 0),
                           schema_element("role", 6, 1, std::nullopt, 0)};
  N footer = N::strukt({{1, N::i32(1)},
                        {2, N::list(N::kStruct, schema)},
                        {3, N::i64(static_cast<int64_t>(rows.size()))},
                        {4, N::list(N::kStruct, row_groups)}});
  std::string f = thrift_encode(footer);
  file += f;
  put_u32(file, static_cast<uint32_t>(f.size()));
  return file + "PAR1";
}

}  // namespace quill::test
