// A small well-formedness check of an SVG (XML) document for tests, without an XML library: one root
// element, every tag closed in order, attribute values quoted, '<' and '&' in text and values only as
// markup or entities.
#pragma once

#include <cctype>
#include <string>
#include <vector>

namespace quill::test {

// "" when `xml` is well formed, else what is wrong and where.
inline std::string svg_problem(const std::string& xml) {
  auto at = [&](size_t i) { return " at byte " + std::to_string(i) + ": " + xml.substr(i, 40); };
  auto name_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == ':' || c == '-' || c == '.'; };
  auto entity_ok = [&](size_t i) {  // xml[i] == '&'
    for (const char* e : {"&amp;", "&lt;", "&gt;", "&quot;", "&apos;"})
      if (xml.compare(i, std::char_traits<char>::length(e), e) == 0) return true;
    if (xml.compare(i, 2, "&#") != 0) return false;
    const size_t semi = xml.find(';', i);
    return semi != std::string::npos && semi - i <= 10;
  };
  std::vector<std::string> open;
  int roots = 0;
  size_t i = 0;
  if (xml.compare(0, 5, "<?xml") == 0) i = xml.find("?>") + 2;
  while (i < xml.size()) {
    if (xml[i] == '&' && !entity_ok(i)) return "a bare '&'" + at(i);
    if (xml[i] != '<') {
      if (open.empty() && !std::isspace(static_cast<unsigned char>(xml[i]))) return "text outside the root element" + at(i);
      ++i;
      continue;
    }
    const size_t tag = i;
    const bool closing = i + 1 < xml.size() && xml[i + 1] == '/';
    i += closing ? 2 : 1;
    const size_t name_begin = i;
    while (i < xml.size() && name_char(xml[i])) ++i;
    const std::string name = xml.substr(name_begin, i - name_begin);
    if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0])) || name[0] == '-')
      return "a '<' that starts no tag" + at(tag);
    if (closing) {
      while (i < xml.size() && std::isspace(static_cast<unsigned char>(xml[i]))) ++i;
      if (i >= xml.size() || xml[i] != '>') return "a closing tag without '>'" + at(tag);
      if (open.empty() || open.back() != name)
        return "</" + name + "> closes " + (open.empty() ? std::string("nothing") : "<" + open.back() + ">") + at(tag);
      open.pop_back();
      ++i;
      continue;
    }
    // Attributes: name="value" (or 'value'), separated by space.
    while (true) {
      const size_t before = i;
      while (i < xml.size() && std::isspace(static_cast<unsigned char>(xml[i]))) ++i;
      if (i >= xml.size()) return "an unclosed tag <" + name + ">" + at(tag);
      if (xml[i] == '>' || xml.compare(i, 2, "/>") == 0) break;
      if (i == before) return "attributes without space between them" + at(i);
      const size_t attribute = i;
      while (i < xml.size() && name_char(xml[i])) ++i;
      if (i == attribute || i >= xml.size() || xml[i] != '=') return "an attribute without =" + at(attribute);
      ++i;
      if (i >= xml.size() || (xml[i] != '"' && xml[i] != '\'')) return "an unquoted attribute value" + at(attribute);
      const char quote = xml[i++];
      const size_t end = xml.find(quote, i);
      if (end == std::string::npos) return "an attribute value never closed" + at(attribute);
      for (size_t k = i; k < end; ++k) {
        if (xml[k] == '<') return "a '<' in an attribute value" + at(k);
        if (xml[k] == '&' && !entity_ok(k)) return "a bare '&' in an attribute value" + at(k);
      }
      i = end + 1;
    }
    const bool empty_element = xml[i] == '/';
    i += empty_element ? 2 : 1;
    if (open.empty() && ++roots > 1) return "a second root element <" + name + ">" + at(tag);
    if (!empty_element) open.push_back(name);
  }
  if (!open.empty()) return "<" + open.back() + "> is never closed";
  if (roots == 0) return "no root element";
  return "";
}

}  // namespace quill::test
