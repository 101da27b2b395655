#include "recipe/yaml_util.h"

#include <fmt/format.h>

#include <cctype>
#include <cmath>
#include <regex>

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
    case YAML::NodeType::Scalar: return a.Scalar() == b.Scalar() && quoted(a) == quoted(b);
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

std::string emit_yaml(const YAML::Node& node) {
  YAML::Emitter e;
  e.SetNullFormat(YAML::LowerNull);
  e.SetIndent(2);
  emit(e, node);
  std::string out = e.c_str();
  if (!out.empty() && out.back() != '\n') out += '\n';
  return out;
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
