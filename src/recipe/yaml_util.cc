#include "recipe/yaml_util.h"

#include <fmt/format.h>

#include <cctype>
#include <cmath>
#include <algorithm>
#include <regex>
#include <string_view>
#include <sstream>
#include <vector>

namespace quill {

namespace {

// A scalar written in quotes (or tagged !!str): it must stay a string whatever it spells.
bool quoted(const YAML::Node& n) { return n.Tag() == "!" || n.Tag() == "tag:yaml.org,2002:str"; }

// Plain spellings that a YAML 1.1 or 1.2 reader takes for something other than a string. Dates stay
// plain on purpose: the seed writes `measured: 2026-10-21` unquoted.
bool reads_as_non_string(const std::string& s) {
  if (s.empty()) return true;
  static const std::regex special(
      "~|null|Null|NULL|true|True|TRUE|false|False|FALSE|yes|Yes|YES|no|No|NO|on|On|ON|off|Off|OFF|y|Y|n|N|"
      "[-+]?\\.(inf|Inf|INF)|\\.(nan|NaN|NAN)|"
      "[-+]?[0-9][0-9_]*|0x[0-9a-fA-F_]+|0o?[0-7_]+|0b[01_]+|"
      "[-+]?([0-9][0-9_]*)?\\.[0-9_]*([eE][-+]?[0-9]+)?|[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+|"
      "[-+]?[0-9][0-9_]*(:[0-5]?[0-9])+(\\.[0-9_]*)?");
  return std::regex_match(s, special);
}

// A literal block (|) reads back exactly when the text ends in one newline, does not start with a
// space or a newline (the block's indentation would be ambiguous) and has no carriage returns or
// control characters.
bool literal_safe(const std::string& s) {
  if (s.size() < 2 || s.back() != '\n' || s[s.size() - 2] == '\n') return false;
  if (s.front() == ' ' || s.front() == '\n' || s.front() == '\t') return false;
  for (unsigned char c : s)
    if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f) return false;
  return true;
}

void emit(YAML::Emitter& e, const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Map:
      if (n.size() == 0) e << YAML::Flow;
      e << YAML::BeginMap;
      for (const auto& kv : n) {
        e << YAML::Key;
        emit(e, kv.first);
        e << YAML::Value;
        emit(e, kv.second);
      }
      e << YAML::EndMap;
      break;
    case YAML::NodeType::Sequence:
      if (n.size() == 0) e << YAML::Flow;
      e << YAML::BeginSeq;
      for (const auto& item : n) emit(e, item);
      e << YAML::EndSeq;
      break;
    case YAML::NodeType::Scalar: {
      const std::string& s = n.Scalar();
      if (n.Tag().size() > 1 && n.Tag()[0] == '!') e << YAML::LocalTag(n.Tag().substr(1));
      if (s.find('\n') != std::string::npos) {
        e << (literal_safe(s) ? YAML::Literal : YAML::DoubleQuoted) << s;
      } else if (quoted(n)) {
        e << YAML::SingleQuoted << s;
      } else {
        e << s;
      }
      break;
    }
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      e << YAML::Null;
      break;
  }
}

}  // namespace

bool yaml_equal(const YAML::Node& a, const YAML::Node& b) {
  auto kind = [](const YAML::Node& n) {
    return n.Type() == YAML::NodeType::Undefined ? YAML::NodeType::Null : n.Type();
  };
  if (kind(a) != kind(b)) return false;
  switch (a.Type()) {
    case YAML::NodeType::Scalar:  // same text and the same meaning (a string, or a number/bool/null)
      return a.Scalar() == b.Scalar() && (quoted(a) || !reads_as_non_string(a.Scalar())) ==
                                             (quoted(b) || !reads_as_non_string(b.Scalar()));
    case YAML::NodeType::Sequence:
      if (a.size() != b.size()) return false;
      for (size_t i = 0; i < a.size(); ++i)
        if (!yaml_equal(a[i], b[i])) return false;
      return true;
    case YAML::NodeType::Map: {
      if (a.size() != b.size()) return false;
      auto ia = a.begin(), ib = b.begin();
      for (; ia != a.end(); ++ia, ++ib)
        if (!yaml_equal(ia->first, ib->first) || !yaml_equal(ia->second, ib->second)) return false;
      return true;
    }
    default: return true;
  }
}

YAML::Node yaml_string(const std::string& s) {
  YAML::Node n(s);
  if (reads_as_non_string(s)) n.SetTag("!");
  return n;
}

YAML::Node yaml_int(int64_t v) { return YAML::Node(fmt::format("{}", v)); }

YAML::Node yaml_bool(bool v) { return YAML::Node(std::string(v ? "true" : "false")); }

std::string format_double(double v) {
  if (std::isnan(v)) return ".nan";
  if (std::isinf(v)) return v > 0 ? ".inf" : "-.inf";
  std::string s = fmt::format("{}", v);  // shortest round-trip spelling
  size_t e = s.find_first_of("eE");
  std::string mantissa = e == std::string::npos ? s : s.substr(0, e);
  std::string exponent = e == std::string::npos ? "" : s.substr(e + 1);
  if (mantissa.find('.') == std::string::npos) mantissa += ".0";
  if (exponent.empty()) return mantissa;
  if (exponent[0] != '-' && exponent[0] != '+') exponent = "+" + exponent;
  return mantissa + "e" + exponent;
}

YAML::Node yaml_double(double v) { return YAML::Node(format_double(v)); }

namespace {

int indent_of(const std::string& line) {
  size_t n = line.find_first_not_of(' ');
  return n == std::string::npos ? -1 : static_cast<int>(n);
}

bool opens_literal(const std::string& line) {
  size_t n = line.size();
  if (n == 0 || line[n - 1] != '|') return false;
  std::string head = line.substr(0, n - 1);
  size_t first = head.find_first_not_of(' ');
  if (first == std::string::npos) return true;
  return (head.size() >= 2 && head.compare(head.size() - 2, 2, ": ") == 0) || head.substr(first) == "- ";
}

// Folds a long `key: value` line at single spaces, as the seed does (a line break inside a plain or
// quoted scalar reads back as one space). Only simple keys, never before a character that could start
// an indicator, never after a backslash (an escape in double quotes).
void fold_long_line(const std::string& line, std::vector<std::string>& out, size_t width = 120) {
  const int indent = indent_of(line);
  size_t colon = line.find(": ");
  bool simple_key = indent >= 0 && colon != std::string::npos && colon > static_cast<size_t>(indent);
  for (size_t k = static_cast<size_t>(std::max(indent, 0)); simple_key && k < colon; ++k) {
    char c = line[k];
    simple_key = std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
  }
  if (line.size() <= width || !simple_key) {
    out.push_back(line);
    return;
  }
  const size_t value_start = colon + 2;
  const char first = line[value_start];
  if (std::string_view("|>&*!%@`{[#?-").find(first) != std::string_view::npos) {
    out.push_back(line);
    return;
  }
  const std::string cont(static_cast<size_t>(indent) + 2, ' ');
  auto can_break = [&](size_t k) {  // break at the space at k
    if (k <= value_start || k + 1 >= line.size() || line[k] != ' ') return false;
    char before = line[k - 1], after = line[k + 1];
    if (before == ' ' || after == ' ' || before == '\t' || after == '\t' || before == '\\') return false;
    return std::string_view("-?:#|>!&*%@`{}[],'\"").find(after) == std::string_view::npos;
  };
  std::string current = line.substr(0, value_start);
  size_t pos = value_start;
  while (pos < line.size()) {
    // The furthest break that keeps this line within the width; else the first break after it.
    size_t limit = width > current.size() ? width - current.size() : 0;
    size_t best = std::string::npos;
    for (size_t k = pos; k < line.size() && k - pos <= limit; ++k)
      if (can_break(k)) best = k;
    if (best == std::string::npos)
      for (size_t k = pos + limit; k < line.size(); ++k)
        if (can_break(k)) {
          best = k;
          break;
        }
    if (best == std::string::npos || line.size() - pos <= limit) {
      out.push_back(current + line.substr(pos));
      return;
    }
    out.push_back(current + line.substr(pos, best - pos));
    current = cont;
    pos = best + 1;
  }
}

// The emitter ends a literal block with a blank line; with the clip indicator (|) trailing blank lines
// are not part of the text, so they go. Long lines outside literal blocks are folded.
std::string tidy_emitted(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  std::vector<std::string> out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (!opens_literal(lines[i])) {
      fold_long_line(lines[i], out);
      continue;
    }
    out.push_back(lines[i]);
    const int base = indent_of(lines[i]);
    size_t j = i + 1, last_content = i;
    for (; j < lines.size(); ++j) {
      int ind = indent_of(lines[j]);
      if (ind >= 0 && ind <= base) break;  // the next key: the block ended
      if (ind >= 0) last_content = j;
    }
    for (size_t k = i + 1; k <= last_content; ++k) out.push_back(lines[k]);
    i = j - 1;  // blank lines between the block's last line and the next key are dropped
  }
  std::string joined;
  for (const std::string& l : out) joined += l + "\n";
  return joined;
}

}  // namespace

std::string emit_yaml(const YAML::Node& node) {
  YAML::Emitter e;
  e.SetNullFormat(YAML::LowerNull);
  e.SetIndent(2);
  emit(e, node);
  return tidy_emitted(e.c_str());
}

std::string emit_yaml_flow(const YAML::Node& node) {
  YAML::Emitter e;
  e.SetNullFormat(YAML::LowerNull);
  e << YAML::Flow;
  if (node.IsScalar()) return node.Scalar();
  e << node;
  return e.c_str();
}

}  // namespace quill
