#include "recipe/run_flags.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <set>
#include <sstream>

#include "base/error.h"

namespace quill {

std::string ParsedFlag::value() const {
  std::string s;
  for (const std::string& v : values) s += (s.empty() ? "" : " ") + v;
  return s;
}

const ParsedFlag* RunFlags::find(std::string_view name) const {
  const FlagSpec* want = find_flag(name);
  std::string bare(name);
  while (!bare.empty() && bare.front() == '-') bare.erase(bare.begin());
  for (auto it = flags.rbegin(); it != flags.rend(); ++it) {
    if (want ? it->spec == want : it->name == bare) return &*it;
  }
  return nullptr;
}

std::pair<std::string, std::string> parse_assignment(const std::string& arg) {
  size_t eq = arg.find('=');
  QUILL_CHECK(eq != std::string::npos && eq > 0, "--set {}: expected NAME=VALUE", arg);
  return {arg.substr(0, eq), arg.substr(eq + 1)};
}

namespace {

// ---- variables ----------------------------------------------------------------------------------

struct Value {
  std::string text;
  bool known = true;
  std::string source;  // why it is not known
  static Value of(std::string t) { return {std::move(t), true, {}}; }
  static Value unknown(std::string t, std::string why) { return {std::move(t), false, std::move(why)}; }
};

struct ArrayValue {
  std::vector<std::string> items;
  std::vector<std::vector<std::string>> unresolved;  // per item: variables it uses without a value
  bool known = true;
  std::string source;
  static ArrayValue of(std::vector<std::string> items) { return {std::move(items), {}, true, {}}; }
  static ArrayValue unknown(std::string why) { return {{}, {}, false, std::move(why)}; }
};

std::vector<std::string> split_words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

struct Vars {
  const VarMap& set;
  std::map<std::string, Value> scalars;
  std::map<std::string, ArrayValue> arrays;
  VarMap exported;  // by the script, to the environment

  std::optional<Value> scalar(const std::string& name) const {
    if (auto it = set.find(name); it != set.end()) return Value::of(it->second);
    if (auto it = scalars.find(name); it != scalars.end()) return it->second;
    return std::nullopt;
  }
  std::optional<ArrayValue> array(const std::string& name) const {
    if (auto it = set.find(name); it != set.end()) return ArrayValue::of(split_words(it->second));
    if (auto it = arrays.find(name); it != arrays.end()) return it->second;
    return std::nullopt;
  }
  void assign(const std::string& name, Value v) {
    if (!set.count(name)) scalars[name] = std::move(v);
  }
  void export_var(const std::string& name) {
    if (auto v = scalar(name)) exported[name] = v->text;
  }
  void assign_array(const std::string& name, ArrayValue v, bool append) {
    if (set.count(name)) return;
    if (append && arrays.count(name)) {
      ArrayValue& a = arrays[name];
      a.items.insert(a.items.end(), v.items.begin(), v.items.end());
      a.unresolved.insert(a.unresolved.end(), v.unresolved.begin(), v.unresolved.end());
      if (!v.known) {
        a.known = false;
        a.source = v.source;
      }
      return;
    }
    arrays[name] = std::move(v);
  }
};

// ---- words --------------------------------------------------------------------------------------

struct Word {
  std::string text;
  bool op = false;                      // an unquoted redirection operator (<, >, <<<, >&2 ...)
  std::vector<std::string> unresolved;  // variables without a known value ($(...) counts as one)
  std::vector<std::string> commands;    // $(...) and `...` bodies
  std::string array;                    // the ${NAME[@]} it expands, when any
  bool only_array = true;               // nothing but that expansion
  std::optional<std::vector<Word>> array_literal;  // NAME=( ... )
  bool pure_array() const { return !array.empty() && only_array; }
};

bool is_name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
bool is_meta(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == ';' || c == '&' || c == '|' || c == '<' || c == '>' || c == '(' ||
         c == ')';
}
bool is_name(std::string_view s) {
  if (s.empty() || !is_name_start(s[0])) return false;
  return std::all_of(s.begin(), s.end(), is_name_char);
}

class ShellReader {
 public:
  ShellReader(const std::string& s, const Vars& vars) : s_(s), vars_(vars) {}

  // The next simple command's words; false at the end of the script.
  bool next(std::vector<Word>& cmd) {
    cmd.clear();
    while (i_ < s_.size()) {
      skip_blanks();
      if (i_ >= s_.size()) break;
      char c = s_[i_];
      if (c == '#') {
        while (i_ < s_.size() && s_[i_] != '\n') ++i_;
      } else if (c == '\n' || c == ';' || c == '&' || c == '|' || c == '(' || c == ')') {
        ++i_;
        if (!cmd.empty()) return true;
      } else if (c == '<' || c == '>') {
        Word w;
        w.op = true;
        if (fd_prefix_ && !cmd.empty()) {  // "2>": the descriptor belongs to the operator
          w.text = cmd.back().text;
          cmd.pop_back();
        }
        while (i_ < s_.size() && (s_[i_] == '<' || s_[i_] == '>')) w.text += s_[i_++];
        if (i_ < s_.size() && s_[i_] == '&') {
          w.text += s_[i_++];
          while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) w.text += s_[i_++];
        }
        cmd.push_back(std::move(w));
      } else {
        const size_t start = i_;
        cmd.push_back(read_word());
        const std::string& t = cmd.back().text;
        fd_prefix_ = i_ < s_.size() && (s_[i_] == '<' || s_[i_] == '>') && i_ - start == t.size() && !t.empty() &&
                     std::all_of(t.begin(), t.end(), [](char d) { return std::isdigit(static_cast<unsigned char>(d)); });
        continue;
      }
      fd_prefix_ = false;
    }
    return !cmd.empty();
  }

 private:
  void skip_blanks() {
    while (i_ < s_.size()) {
      if (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\r') {
        ++i_;
      } else if (s_[i_] == '\\' && i_ + 1 < s_.size() && s_[i_ + 1] == '\n') {
        i_ += 2;  // a continuation joins the lines
      } else {
        break;
      }
    }
  }

  void literal(Word& w, char c) {
    w.text += c;
    w.only_array = false;
  }

  Word read_word() {
    Word w;
    while (i_ < s_.size()) {
      char c = s_[i_];
      if (c == '\\') {
        if (i_ + 1 < s_.size() && s_[i_ + 1] == '\n') {
          i_ += 2;
          continue;
        }
        if (i_ + 1 < s_.size()) literal(w, s_[i_ + 1]);
        i_ += 2;
      } else if (c == '=' && i_ + 1 < s_.size() && s_[i_ + 1] == '(' &&
                 (is_name(w.text) || (w.text.size() > 1 && w.text.back() == '+' &&
                                      is_name(std::string_view(w.text).substr(0, w.text.size() - 1))))) {
        literal(w, '=');
        i_ += 2;
        w.array_literal = read_array_literal();
      } else if (is_meta(c)) {
        break;
      } else if (c == '\'') {
        size_t end = s_.find('\'', i_ + 1);
        if (end == std::string::npos) end = s_.size();
        w.text += s_.substr(i_ + 1, end - i_ - 1);
        w.only_array = false;
        i_ = std::min(end + 1, s_.size());
      } else if (c == '"') {
        ++i_;
        read_double_quoted(w);
      } else if (c == '$') {
        expand(w);
      } else if (c == '`') {
        backtick(w);
      } else {
        literal(w, c);
        ++i_;
      }
    }
    return w;
  }

  std::vector<Word> read_array_literal() {
    std::vector<Word> items;
    while (i_ < s_.size()) {
      skip_blanks();
      if (i_ >= s_.size()) break;
      char c = s_[i_];
      if (c == ')') {
        ++i_;
        break;
      }
      if (c == '\n') {
        ++i_;
      } else if (c == '#') {
        while (i_ < s_.size() && s_[i_] != '\n') ++i_;
      } else if (is_meta(c)) {
        ++i_;  // stray operator inside ( ... ): not a word
      } else {
        items.push_back(read_word());
      }
    }
    return items;
  }

  void read_double_quoted(Word& w) {
    while (i_ < s_.size() && s_[i_] != '"') {
      char c = s_[i_];
      if (c == '\\' && i_ + 1 < s_.size()) {
        char n = s_[i_ + 1];
        if (n == '\n') {
          i_ += 2;
        } else if (n == '$' || n == '`' || n == '"' || n == '\\') {
          literal(w, n);
          i_ += 2;
        } else {
          literal(w, c);
          ++i_;
        }
      } else if (c == '$') {
        expand(w);
      } else if (c == '`') {
        backtick(w);
      } else {
        literal(w, c);
        ++i_;
      }
    }
    if (i_ < s_.size()) ++i_;  // the closing quote
    if (w.text.empty() && w.array.empty()) w.only_array = false;  // "" is an (empty) word
  }

  // Text up to the parenthesis that closes the one before i_ (quotes respected).
  std::string balanced(char open, char close) {
    int depth = 1;
    size_t start = i_;
    char quote = 0;
    while (i_ < s_.size()) {
      char c = s_[i_];
      if (quote) {
        if (c == quote) quote = 0;
      } else if (c == '\'' || c == '"') {
        quote = c;
      } else if (c == open) {
        ++depth;
      } else if (c == close && --depth == 0) {
        ++i_;
        return s_.substr(start, i_ - 1 - start);
      }
      ++i_;
    }
    return s_.substr(start);
  }

  void substitution(Word& w, const std::string& body, const std::string& spelled) {
    w.commands.push_back(body);
    w.unresolved.push_back(spelled);
    w.text += spelled;
    w.only_array = false;
  }

  void backtick(Word& w) {
    size_t end = s_.find('`', i_ + 1);
    if (end == std::string::npos) end = s_.size();
    std::string body = s_.substr(i_ + 1, end - i_ - 1);
    i_ = std::min(end + 1, s_.size());
    substitution(w, body, "`" + body + "`");
  }

  void use_scalar(Word& w, const std::string& name, const std::string& spelled) {
    w.only_array = false;
    std::optional<Value> v = vars_.scalar(name);
    if (v && v->known) {
      w.text += v->text;
    } else {
      w.text += spelled;
      w.unresolved.push_back(name);
    }
  }

  void expand(Word& w) {
    ++i_;  // past '$'
    if (i_ >= s_.size()) {
      literal(w, '$');
      return;
    }
    char c = s_[i_];
    if (c == '(') {
      ++i_;
      std::string body = balanced('(', ')');
      substitution(w, body, "$(" + body + ")");
    } else if (c == '{') {
      ++i_;
      std::string inner = balanced('{', '}');
      expand_braced(w, inner);
    } else if (is_name_start(c)) {
      size_t start = i_;
      while (i_ < s_.size() && is_name_char(s_[i_])) ++i_;
      std::string name = s_.substr(start, i_ - start);
      use_scalar(w, name, "$" + name);
    } else if (std::isdigit(static_cast<unsigned char>(c)) || std::string_view("@*#?$!-").find(c) != std::string_view::npos) {
      ++i_;
      w.text += std::string("$") + c;
      w.unresolved.push_back(std::string("$") + c);
      w.only_array = false;
    } else {
      literal(w, '$');
    }
  }

  void expand_braced(Word& w, const std::string& inner) {
    size_t n = 0;
    while (n < inner.size() && is_name_char(inner[n])) ++n;
    std::string name = inner.substr(0, n);
    std::string rest = inner.substr(n);
    const std::string spelled = "${" + inner + "}";
    if (is_name(name) && (rest == "[@]" || rest == "[*]")) {
      if (!w.array.empty() || !w.text.empty()) w.only_array = false;
      w.array = name;
      std::optional<ArrayValue> a = vars_.array(name);
      if (a && a->known) {
        for (size_t k = 0; k < a->items.size(); ++k) w.text += (k ? " " : "") + a->items[k];
      } else {
        w.text += spelled;
        w.unresolved.push_back(name);
      }
    } else if (is_name(name) && rest.empty()) {
      use_scalar(w, name, spelled);
    } else if (is_name(name) && (rest.rfind(":-", 0) == 0 || rest.rfind("-", 0) == 0)) {
      w.only_array = false;
      std::optional<Value> v = vars_.scalar(name);
      std::string fallback = rest.substr(rest[0] == ':' ? 2 : 1);
      if (v && v->known && !(rest[0] == ':' && v->text.empty())) {
        w.text += v->text;
      } else if (!v || v->known) {
        w.text += fallback;  // unset: the default applies
      } else {
        w.text += spelled;
        w.unresolved.push_back(name);
      }
    } else {
      w.only_array = false;
      w.text += spelled;
      w.unresolved.push_back(spelled);
    }
  }

  const std::string& s_;
  const Vars& vars_;
  size_t i_ = 0;
  bool fd_prefix_ = false;  // the last word was a file descriptor written against a redirection
};

// ---- commands -----------------------------------------------------------------------------------

bool is_assignment(const Word& w, std::string* name, bool* append) {
  if (w.op) return false;
  size_t eq = w.text.find('=');
  if (eq == std::string::npos || eq == 0) return false;
  std::string n = w.text.substr(0, eq);
  *append = !n.empty() && n.back() == '+';
  if (*append) n.pop_back();
  if (!is_name(n)) return false;
  *name = n;
  return true;
}

std::string unknown_source(const Word& w, const Vars& vars) {
  if (!w.commands.empty()) return fmt::format("the output of `{}`", w.commands.front());
  for (const std::string& u : w.unresolved) {
    if (auto v = vars.scalar(u); v && !v->known) return v->source;
    if (auto a = vars.array(u); a && !a->known) return a->source;
  }
  std::string names;
  for (const std::string& u : w.unresolved) names += (names.empty() ? "" : ", ") + u;
  return fmt::format("unset variable(s) {}", names);
}

void assign(Vars& vars, const std::string& name, bool append, const Word& w) {
  if (w.array_literal) {
    ArrayValue a;
    for (const Word& item : *w.array_literal) {
      if (item.pure_array()) {
        std::optional<ArrayValue> inner = vars.array(item.array);
        if (inner && inner->known) {
          a.items.insert(a.items.end(), inner->items.begin(), inner->items.end());
          inner->unresolved.resize(inner->items.size());
          a.unresolved.insert(a.unresolved.end(), inner->unresolved.begin(), inner->unresolved.end());
        } else if (a.known) {
          a.known = false;  // its words cannot be known
          a.source = unknown_source(item, vars);
        }
        continue;
      }
      a.items.push_back(item.text);
      a.unresolved.push_back(item.unresolved);
    }
    vars.assign_array(name, std::move(a), append);
    return;
  }
  std::string value = w.text.substr(w.text.find('=') + 1);
  if (w.unresolved.empty()) {
    if (append) {
      if (auto old = vars.scalar(name); old && old->known) value = old->text + value;
    }
    vars.assign(name, Value::of(value));
  } else {
    vars.assign(name, Value::unknown(value, unknown_source(w, vars)));
  }
}

// `read -ra NAME <<< WORD`: NAME becomes WORD split on blanks.
void run_read(Vars& vars, const std::vector<Word>& cmd) {
  std::string array_name;
  const Word* input = nullptr;
  for (size_t k = 1; k < cmd.size(); ++k) {
    const Word& w = cmd[k];
    if (w.op && w.text == "<<<" && k + 1 < cmd.size()) {
      input = &cmd[++k];
    } else if (!w.op && w.text.size() > 1 && w.text[0] == '-' && w.text.find('a') != std::string::npos &&
               k + 1 < cmd.size()) {
      array_name = cmd[++k].text;
    }
  }
  if (array_name.empty() || !is_name(array_name)) return;
  if (!input) {
    vars.assign_array(array_name, ArrayValue::unknown("standard input"), false);
  } else if (input->unresolved.empty()) {
    vars.assign_array(array_name, ArrayValue::of(split_words(input->text)), false);
  } else {
    vars.assign_array(array_name, ArrayValue::unknown(unknown_source(*input, vars)), false);
  }
}

// Applies a command's effect on variables; returns the words of a command that runs something
// (assignments before it stripped, their names in `prefix`), or nothing.
std::vector<Word> run_command(Vars& vars, std::vector<Word> cmd, std::vector<std::string>& prefix) {
  size_t first = 0;
  std::string name;
  bool append = false;
  prefix.clear();
  while (first < cmd.size() && is_assignment(cmd[first], &name, &append)) {
    assign(vars, name, append, cmd[first]);
    prefix.push_back(name);
    ++first;
  }
  cmd.erase(cmd.begin(), cmd.begin() + static_cast<std::ptrdiff_t>(first));
  if (cmd.empty()) return {};
  const std::string& verb = cmd[0].text;
  if (verb == "export" || verb == "declare" || verb == "local" || verb == "readonly" || verb == "typeset") {
    const bool exports = verb == "export" || std::any_of(cmd.begin() + 1, cmd.end(), [](const Word& w) {
                           return w.text.size() > 1 && w.text[0] == '-' && w.text.find('x') != std::string::npos;
                         });
    for (size_t k = 1; k < cmd.size(); ++k) {
      if (is_assignment(cmd[k], &name, &append)) assign(vars, name, append, cmd[k]);
      else if (is_name(cmd[k].text)) name = cmd[k].text;
      else continue;
      if (exports) vars.export_var(name);
    }
    return {};
  }
  if (verb == "read") {
    run_read(vars, cmd);
    return {};
  }
  return cmd;
}

bool flag_like(const Word& w) { return !w.op && w.text.size() > 2 && w.text.rfind("--", 0) == 0; }

size_t count_flags(const std::vector<Word>& cmd) {
  return static_cast<size_t>(std::count_if(cmd.begin(), cmd.end(), [](const Word& w) {
    return flag_like(w) || (w.pure_array() && !w.unresolved.empty());
  }));
}

void add_once(std::vector<std::string>& list, const std::string& s) {
  if (std::find(list.begin(), list.end(), s) == list.end()) list.push_back(s);
}

// Splits the training command's words into its flags.
void read_flags(const std::vector<Word>& words, const Vars& vars, RunFlags& out) {
  size_t k = 0;
  std::string program;
  while (k < words.size() && !flag_like(words[k]) && !words[k].pure_array()) {
    if (!words[k].op) program += (program.empty() ? "" : " ") + words[k].text;
    ++k;
  }
  out.program = program;
  std::set<std::string> seen;
  while (k < words.size()) {
    const Word& w = words[k];
    if (w.op) {
      k += w.text.find('&') == std::string::npos ? 2 : 1;  // a redirection and its target (">&1" has it inside)
      continue;
    }
    if (w.pure_array() && !w.unresolved.empty()) {
      std::optional<ArrayValue> a = vars.array(w.array);
      out.unexpanded.push_back({w.array, a ? a->source : "an unset array"});
      ++k;
      continue;
    }
    if (!flag_like(w)) {
      out.problems.push_back(fmt::format("stray word '{}' in the training command", w.text));
      ++k;
      continue;
    }
    ParsedFlag f;
    std::string text = w.text.substr(2);
    size_t eq = text.find('=');
    f.name = eq == std::string::npos ? text : text.substr(0, eq);
    f.spec = find_flag(f.name);
    f.unresolved = w.unresolved;
    ++k;
    if (eq != std::string::npos) {
      f.values.push_back(text.substr(eq + 1));
    } else {
      const bool one = f.spec && f.spec->kind != FlagKind::List && f.spec->kind != FlagKind::Switch;
      const bool none = f.spec && f.spec->kind == FlagKind::Switch;
      while (!none && k < words.size() && !words[k].op && !flag_like(words[k]) &&
             !(words[k].pure_array() && !words[k].unresolved.empty())) {
        f.values.push_back(words[k].text);
        f.unresolved.insert(f.unresolved.end(), words[k].unresolved.begin(), words[k].unresolved.end());
        ++k;
        if (one) break;
      }
    }
    if (f.spec && f.spec->kind != FlagKind::Switch && f.values.empty())
      out.problems.push_back(fmt::format("--{} has no value", f.name));
    if (f.spec && f.spec->kind == FlagKind::Switch && !f.values.empty())
      out.problems.push_back(fmt::format("--{} takes no value, got '{}'", f.name, f.value()));
    std::string key = f.spec ? f.spec->name : f.name;
    if (!seen.insert(key).second) out.problems.push_back(fmt::format("--{} is given more than once; the last applies", f.name));
    if (!f.spec) add_once(out.unknown, "--" + f.name);
    for (const std::string& u : f.unresolved) add_once(out.unresolved, u);
    out.flags.push_back(std::move(f));
  }
}

// Replaces each ${NAME[@]} word whose array is known by the array's words.
std::vector<Word> splice_arrays(const std::vector<Word>& cmd, const Vars& vars) {
  std::vector<Word> out;
  for (const Word& w : cmd) {
    if (w.pure_array() && w.unresolved.empty()) {
      std::optional<ArrayValue> a = vars.array(w.array);
      if (!a) continue;
      a->unresolved.resize(a->items.size());
      for (size_t k = 0; k < a->items.size(); ++k) {
        Word x;
        x.text = a->items[k];
        x.unresolved = a->unresolved[k];
        x.only_array = false;
        out.push_back(std::move(x));
      }
    } else {
      out.push_back(w);
    }
  }
  return out;
}

}  // namespace

RunFlags parse_run_flags(const std::string& script, const VarMap& env, const VarMap& set) {
  Vars vars{set, {}, {}};
  for (const auto& [k, v] : env) vars.scalars[k] = Value::of(v);
  RunFlags out;
  std::vector<Word> best;
  size_t best_count = 0;
  VarMap best_prefix;
  ShellReader reader(script, vars);
  std::vector<Word> cmd;
  std::vector<std::string> prefix;
  while (reader.next(cmd)) {
    std::vector<Word> words = run_command(vars, cmd, prefix);
    if (words.empty()) continue;
    words = splice_arrays(words, vars);
    // A launcher that wraps the trainer (`ray job submit ... -- python3 train.py ...`).
    auto dashdash = std::find_if(words.begin(), words.end(), [](const Word& w) { return !w.op && w.text == "--"; });
    if (dashdash != words.end()) words.erase(words.begin(), dashdash + 1);
    size_t n = count_flags(words);
    if (n > best_count) {
      best_count = n;
      best = std::move(words);
      best_prefix.clear();
      for (const std::string& p : prefix)
        if (auto v = vars.scalar(p)) best_prefix[p] = v->text;
      out.exported = vars.exported;
    }
  }
  if (best_count > 0) {
    out.found = true;
    read_flags(best, vars, out);
  }
  for (const auto& [k, v] : vars.scalars)
    if (v.known) out.variables[k] = v.text;
  for (const auto& [k, v] : set) out.variables[k] = v;
  for (const auto& [k, v] : best_prefix) out.exported[k] = v;
  return out;
}

}  // namespace quill
