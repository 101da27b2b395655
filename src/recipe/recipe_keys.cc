#include "recipe/recipe_keys.h"

#include <algorithm>
#include <type_traits>

namespace quill {

namespace {

template <class T> struct Unwrap { using type = T; };
template <class T> struct Unwrap<std::optional<T>> { using type = T; };

struct NoOp {
  template <class T> void operator()(const char*, T&) {}
};
template <class T> concept Sectioned = requires(T& t, NoOp v) { t.visit(v); };

std::string join(const std::string& path, const std::string& key) { return path.empty() ? key : path + "." + key; }

std::string nearest_of(const std::string& key, const std::vector<std::string>& known) {
  std::string best;
  size_t best_d = SIZE_MAX;
  for (const std::string& k : known) {
    const size_t d = edit_distance(key, k);
    if (d < best_d) best_d = d, best = k;
  }
  return best;
}

void report_unknown(const YAML::Node& n, const std::string& path, const std::vector<std::string>& known,
                    std::vector<UnknownKey>& out) {
  for (const auto& kv : n) {
    const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : std::string("?");
    if (std::find(known.begin(), known.end(), key) == known.end()) out.push_back({join(path, key), nearest_of(key, known)});
  }
}

template <class T> void walk(const YAML::Node& n, const std::string& path, std::vector<UnknownKey>& out);

// Records a section's key names, and walks into the sections below it.
struct Collector {
  const YAML::Node& node;
  const std::string& path;
  std::vector<UnknownKey>& out;
  std::vector<std::string> names;
  template <class F> void operator()(const char* key, F&) {
    names.emplace_back(key);
    using U = typename Unwrap<F>::type;
    const YAML::Node child = node[key];
    if constexpr (std::is_same_v<U, Recompute>) {
      if (child.IsMap()) report_unknown(child, join(path, key), {"granularity", "method", "num_layers"}, out);
    } else if constexpr (Sectioned<U>) {
      walk<U>(child, join(path, key), out);
    }
  }
};

template <class T> void walk(const YAML::Node& n, const std::string& path, std::vector<UnknownKey>& out) {
  if (!n.IsDefined() || !n.IsMap()) return;  // a wrong type is the reader's error
  std::vector<UnknownKey> below;
  Collector c{n, path, below, {}};
  T probe{};
  probe.visit(c);
  report_unknown(n, path, c.names, out);
  out.insert(out.end(), below.begin(), below.end());
}

}  // namespace

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::vector<UnknownKey> unknown_recipe_keys(const Recipe& recipe) {
  std::vector<UnknownKey> out;
  walk<RecipeFields>(recipe.doc, "", out);
  return out;
}

}  // namespace quill
