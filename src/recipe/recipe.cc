// Reading and writing the typed recipe model. One generic reader and one generic writer walk the
// `visit` lists of recipe.h, so a field added there is read, written and compared with no other edit.
#include "recipe/recipe.h"

#include <fmt/format.h>

#include <sstream>
#include <type_traits>

#include "base/error.h"
#include "base/file_util.h"
#include "recipe/yaml_util.h"

namespace quill {

bool RawYaml::operator==(const RawYaml& other) const { return yaml_equal(node, other.node); }

namespace {

template <class T> struct IsOptional : std::false_type {};
template <class T> struct IsOptional<std::optional<T>> : std::true_type {};

struct NoOp {
  template <class T> void operator()(const char*, T&) {}
};
template <class T> concept Visitable = requires(T& t, NoOp v) { t.visit(v); };

std::string join_path(const std::string& parent, const std::string& key) {
  return parent.empty() ? key : parent + "." + key;
}

std::string describe(const YAML::Node& n) {
  if (n.IsScalar()) return fmt::format("'{}'", n.Scalar());
  if (n.IsMap()) return "a map";
  if (n.IsSequence()) return "a list";
  return "null";
}

// ---- reading ------------------------------------------------------------------------------------

struct ReadCtx {
  std::string file;
  [[noreturn]] void fail(const std::string& path, const std::string& what, const YAML::Node& n) const {
    QUILL_FAIL("{}: {}: expected {}, got {}", file, path, what, describe(n));
  }
};

template <class T> void read_value(const YAML::Node& n, const std::string& path, T& out, const ReadCtx& c);

struct Reader {
  const YAML::Node& node;
  const std::string& path;
  const ReadCtx& ctx;
  template <class T> void operator()(const char* key, T& field) { read_value(node[key], join_path(path, key), field, ctx); }
};

template <class S> S scalar_as(const YAML::Node& n, const std::string& path, const char* what, const ReadCtx& c) {
  if (!n.IsScalar()) c.fail(path, what, n);
  try {
    return n.as<S>();
  } catch (const YAML::Exception&) {
    c.fail(path, what, n);
  }
}

void read_recompute(const YAML::Node& n, const std::string& path, Recompute& out, const ReadCtx& c) {
  if (n.IsScalar()) {
    out.granularity = n.Scalar();
    return;
  }
  if (!n.IsMap()) c.fail(path, "a granularity or a map {granularity, method, num_layers}", n);
  read_value(n["granularity"], path + ".granularity", out.granularity, c);
  read_value(n["method"], path + ".method", out.method, c);
  read_value(n["num_layers"], path + ".num_layers", out.num_layers, c);
}

template <class T> void read_value(const YAML::Node& n, const std::string& path, T& out, const ReadCtx& c) {
  if constexpr (IsOptional<T>::value) {
    if (!n.IsDefined() || n.IsNull()) {
      out.reset();
      return;
    }
    typename T::value_type v{};
    read_value(n, path, v, c);
    out = std::move(v);
  } else if constexpr (std::is_same_v<T, RawYaml>) {
    out.node = YAML::Clone(n);
  } else {
    if (!n.IsDefined() || n.IsNull()) return;  // absent: the default
    if constexpr (std::is_same_v<T, std::string>) {
      if (!n.IsScalar()) c.fail(path, "a string", n);
      out = n.Scalar();
    } else if constexpr (std::is_same_v<T, int64_t>) {
      out = scalar_as<int64_t>(n, path, "an integer", c);
    } else if constexpr (std::is_same_v<T, double>) {
      out = scalar_as<double>(n, path, "a number", c);
    } else if constexpr (std::is_same_v<T, bool>) {
      out = scalar_as<bool>(n, path, "true or false", c);
    } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
      if (!n.IsSequence()) c.fail(path, "a list of integers", n);
      out.clear();
      for (size_t i = 0; i < n.size(); ++i) out.push_back(scalar_as<int64_t>(n[i], fmt::format("{}[{}]", path, i), "an integer", c));
    } else if constexpr (std::is_same_v<T, StringMap>) {
      if (!n.IsMap()) c.fail(path, "a map of NAME: value", n);
      out.clear();
      for (const auto& kv : n) {
        std::string key = kv.first.Scalar();
        if (!kv.second.IsScalar() && !kv.second.IsNull()) c.fail(join_path(path, key), "a string", kv.second);
        out.emplace_back(key, kv.second.IsNull() ? std::string() : kv.second.Scalar());
      }
    } else if constexpr (std::is_same_v<T, Recompute>) {
      read_recompute(n, path, out, c);
    } else {
      static_assert(Visitable<T>);
      if (!n.IsMap()) c.fail(path, "a map", n);
      Reader r{n, path, c};
      out.visit(r);
    }
  }
}

// ---- writing ------------------------------------------------------------------------------------

YAML::Node null_node() { return YAML::Node(YAML::NodeType::Null); }

template <class T> YAML::Node to_node(const T& v, const YAML::Node& existing) {
  if constexpr (std::is_same_v<T, std::string>) {
    return yaml_string(v);
  } else if constexpr (std::is_same_v<T, int64_t>) {
    return yaml_int(v);
  } else if constexpr (std::is_same_v<T, double>) {
    return yaml_double(v);
  } else if constexpr (std::is_same_v<T, bool>) {
    return yaml_bool(v);
  } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
    YAML::Node s(YAML::NodeType::Sequence);
    for (int64_t x : v) s.push_back(yaml_int(x));
    return s;
  } else if constexpr (std::is_same_v<T, StringMap>) {
    YAML::Node m(YAML::NodeType::Map);
    for (const auto& [key, value] : v) {
      // (a recipe built from scratch has no such section: `existing` is then undefined, not a map)
      YAML::Node old = existing.IsDefined() && existing.IsMap() ? existing[key] : YAML::Node();
      bool same = old.IsDefined() && old.IsScalar() && old.Scalar() == value;
      m[key] = same ? old : yaml_string(value);  // an unchanged entry keeps its spelling
    }
    return m;
  } else if constexpr (std::is_same_v<T, RawYaml>) {
    return YAML::Clone(v.node);
  } else if constexpr (std::is_same_v<T, Recompute>) {
    if (!v.method && !v.num_layers) return yaml_string(v.granularity);
    YAML::Node m(YAML::NodeType::Map);
    m["granularity"] = yaml_string(v.granularity);
    m["method"] = v.method ? yaml_string(*v.method) : null_node();
    m["num_layers"] = v.num_layers ? yaml_int(*v.num_layers) : null_node();
    return m;
  }
}

template <class T> void write_field(YAML::Node& parent, const std::string& key, const T& value, bool fill);

struct Writer {
  YAML::Node& node;
  bool fill;  // write absent keys too (nulls included): a recipe or section built from scratch
  template <class T> void operator()(const char* key, const T& field) { write_field(node, key, field, fill); }
};

// True when the node already spells `value` (so it is left as written; a null stands for the
// type's default).
template <class T> bool node_holds(const YAML::Node& n, const T& value) {
  try {
    T back{};
    read_value(n, "", back, ReadCtx{});
    return back == value;
  } catch (const Error&) {
    return false;
  }
}

template <class T> void write_field(YAML::Node& parent, const std::string& key, const T& value, bool fill) {
  const YAML::Node& view = parent;
  YAML::Node existing = view[key];
  const bool exists = existing.IsDefined();
  if constexpr (IsOptional<T>::value) {
    if (!value) {
      if ((exists && !existing.IsNull()) || (!exists && fill)) parent[key] = null_node();
      return;
    }
    write_field(parent, key, *value, fill);
  } else if constexpr (Visitable<T>) {
    YAML::Node section = exists && existing.IsMap() ? existing : YAML::Node(YAML::NodeType::Map);
    Writer w{section, fill || !exists || !existing.IsMap()};
    const_cast<T&>(value).visit(w);  // the writer only reads the fields
    if (!exists || !existing.IsMap()) parent[key] = section;
  } else {
    if (exists && node_holds(existing, value)) return;
    parent[key] = to_node(value, existing);
  }
}

std::string leading_comment_of(const std::string& text) {
  std::istringstream in(text);
  std::string line, out;
  while (std::getline(in, line)) {
    size_t first = line.find_first_not_of(" \t\r");
    if (first != std::string::npos && line[first] != '#') break;
    out += line + "\n";
  }
  // Trailing blank lines belong to the layout, not to the comment.
  while (out.size() >= 2 && out[out.size() - 2] == '\n') out.pop_back();
  if (out == "\n") out.clear();
  return out;
}

}  // namespace

bool operator==(const Recipe& a, const Recipe& b) {
  return static_cast<const RecipeFields&>(a) == static_cast<const RecipeFields&>(b) &&
         yaml_equal(recipe_to_node(a), recipe_to_node(b));
}

Recipe parse_recipe(const std::string& text, const std::string& name) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    QUILL_FAIL("{}: malformed YAML at line {}, column {}: {}", name, e.mark.line + 1, e.mark.column + 1, e.msg);
  }
  QUILL_CHECK(root.IsMap(), "{}: a recipe is one YAML map (schema_version, model, gpu, ...), got {}", name,
              describe(root));
  Recipe r;
  ReadCtx ctx{name};
  Reader reader{root, std::string(), ctx};
  r.visit(reader);
  r.doc = root;
  r.leading_comment = leading_comment_of(text);
  r.source = name;
  return r;
}

Recipe read_recipe(const std::string& path) {
  QUILL_CHECK(path_exists(path), "{}: no such recipe file", path);
  return parse_recipe(read_file(path), path);
}

YAML::Node recipe_to_node(const Recipe& recipe) {
  const bool from_doc = recipe.doc.IsDefined() && recipe.doc.IsMap();
  YAML::Node root = from_doc ? YAML::Clone(recipe.doc) : YAML::Node(YAML::NodeType::Map);
  Writer w{root, !from_doc};
  const_cast<Recipe&>(recipe).visit(w);
  return root;
}

std::string recipe_to_yaml(const Recipe& recipe) { return recipe.leading_comment + emit_yaml(recipe_to_node(recipe)); }

void write_recipe(const std::string& path, const Recipe& recipe) { write_file_atomic(path, recipe_to_yaml(recipe)); }

}  // namespace quill
