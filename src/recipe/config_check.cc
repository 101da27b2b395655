#include "recipe/config_check.h"

#include <fmt/format.h>

#include <map>
#include <set>

#include "recipe/run_definition.h"
#include "recipe/validate.h"
#include "recipe/yaml_util.h"

namespace quill {

namespace {

using Settings = std::map<std::string, std::string>;

// path -> scalar text of every leaf under `node` (a list or map that is a leaf value is written in flow style).
void flatten(const YAML::Node& node, const std::string& path, Settings& out) {
  if (node.IsMap() && node.size() > 0) {
    for (const auto& kv : node) flatten(kv.second, path + "." + kv.first.Scalar(), out);
  } else if (!node.IsDefined() || node.IsNull()) {
    out[path] = "null";
  } else {
    out[path] = emit_yaml_flow(node);
  }
}

bool in(const std::string& path, std::initializer_list<const char*> names, const char* section) {
  for (const char* n : names)
    if (path == fmt::format("{}.{}", section, n) || path.rfind(fmt::format("{}.{}.", section, n), 0) == 0) return true;
  return false;
}

struct Classed {
  SettingClass cls;
  std::string note;
  bool ignore = false;
};

Classed classify_field(const std::string& path) {
  if (path == "model") return {SettingClass::Numerics, "the model"};
  if (path.rfind("gpu.", 0) == 0) return {SettingClass::Placement, "hardware the run is placed on"};
  if (path.rfind("workload.", 0) == 0) {
    if (in(path, {"row_tokens", "rows", "global_batch", "precision", "dataset"}, "workload"))
      return {SettingClass::Numerics, "data, batch or precision"};
    return {SettingClass::Unknown, "a workload field the project does not know"};
  }
  if (path.rfind("layout.", 0) == 0) {
    if (in(path, {"label", "summary", "highlights"}, "layout")) return {SettingClass::Placement, "description", true};
    if (in(path, {"tp", "pp", "vpp", "cp", "ep", "etp", "dp", "sequence_parallel", "layer_split", "max_tokens_per_gpu",
                  "rows_per_microbatch", "recompute", "offload", "dispatcher"},
           "layout"))
      return {SettingClass::Placement, ""};
    return {SettingClass::Unknown, "a layout field the project does not know"};
  }
  if (path.rfind("env.", 0) == 0 || path.rfind("run.$", 0) == 0) {
    SettingClass c = path[0] == 'e' ? env_class(path.substr(4)) : env_class(path.substr(5));
    if (c == SettingClass::Launcher) return {SettingClass::Placement, "launcher: irrelevant to the math"};
    return {c, c == SettingClass::Unknown ? "an environment variable the project does not know" : ""};
  }
  return {SettingClass::Unknown, ""};
}

Classed classify_flag(const std::string& name) {
  const FlagSpec* spec = find_flag(name);
  if (!spec) return {SettingClass::Unknown, "a flag the project does not understand"};
  if (spec->cls == SettingClass::Launcher) return {SettingClass::Placement, fmt::format("launcher: {}", spec->meaning)};
  return {spec->cls, spec->meaning};
}

struct Side {
  Settings fields;
  Settings flags;
  RunFlags run;
  std::string program;
  std::map<std::string, std::string> arrays;  // unexpanded arrays -> source
};

Side describe(const Recipe& r, const ConfigCheckOptions& o) {
  Side s;
  YAML::Node root = recipe_to_node(r);
  for (const char* section : {"model", "gpu", "workload", "layout", "env"}) {
    YAML::Node n = root[section];
    if (std::string(section) == "model") s.fields["model"] = n.IsDefined() && !n.IsNull() ? emit_yaml_flow(n) : "null";
    else if (n.IsDefined() && !n.IsNull()) flatten(n, section, s.fields);
  }
  s.run = parse_run_flags(r.run, recipe_variables(r), o.set);
  s.flags = effective_flags(s.run);
  // What the script exports to the trainer: a changed NCCL setting there counts as much as one in
  // the env section. (Plain shell variables reach the run only through the flags, compared below.)
  for (const auto& [name, value] : s.run.exported) s.fields["run.$" + name] = value;
  s.program = s.run.program;
  for (const UnexpandedArray& a : s.run.unexpanded) s.arrays[a.name] = a.source;
  return s;
}

void compare(const Settings& a, const Settings& b, bool flags, std::vector<SettingDiff>& out) {
  std::set<std::string> keys;
  for (const auto& [k, v] : a) keys.insert(k);
  for (const auto& [k, v] : b) keys.insert(k);
  for (const std::string& k : keys) {
    auto ia = a.find(k), ib = b.find(k);
    std::optional<std::string> va = ia == a.end() ? std::nullopt : std::optional(ia->second);
    std::optional<std::string> vb = ib == b.end() ? std::nullopt : std::optional(ib->second);
    if (va == vb) continue;
    Classed c = flags ? classify_flag(k) : classify_field(k);
    if (c.ignore) continue;
    out.push_back({flags ? "--" + k : k, va, vb, c.cls, c.note});
  }
}

}  // namespace

ConfigCheckResult check_config(const Recipe& candidate, const Recipe& reference, const ConfigCheckOptions& o) {
  ConfigCheckResult res;
  Side c = describe(candidate, o), g = describe(reference, o);
  compare(c.fields, g.fields, false, res.differences);
  compare(c.flags, g.flags, true, res.differences);
  if (c.program != g.program)
    res.differences.push_back({"run.program", c.program, g.program, SettingClass::Unknown, "the training command"});
  if (c.arrays != g.arrays) {
    std::set<std::string> names;
    for (const auto& [k, v] : c.arrays) names.insert(k);
    for (const auto& [k, v] : g.arrays) names.insert(k);
    for (const std::string& n : names) {
      auto a = c.arrays.find(n), b = g.arrays.find(n);
      std::optional<std::string> va = a == c.arrays.end() ? std::nullopt : std::optional(a->second);
      std::optional<std::string> vb = b == g.arrays.end() ? std::nullopt : std::optional(b->second);
      if (va != vb)
        res.differences.push_back({fmt::format("run.\"${{{}[@]}}\"", n), va, vb, SettingClass::Unknown,
                                   "flags the reader cannot see"});
    }
  }
  for (const auto& [name, source] : c.arrays)
    if (g.arrays.count(name) && g.arrays.at(name) == source)
      res.notes.push_back(fmt::format("\"${{{}[@]}}\" is not expanded in either recipe; both take its words from {}",
                                      name, source));
  std::set<std::string> unresolved(c.run.unresolved.begin(), c.run.unresolved.end());
  unresolved.insert(g.run.unresolved.begin(), g.run.unresolved.end());
  for (const std::string& v : unresolved)
    res.notes.push_back(fmt::format("{} has no value here; flag values using it are compared as written", v));
  res.notes.push_back("not compared: stack versions, result, correctness, notes");
  res.passed = true;
  for (const SettingDiff& d : res.differences)
    if (d.cls != SettingClass::Placement) res.passed = false;
  return res;
}

nlohmann::json ConfigCheckResult::to_json() const {
  nlohmann::json j;
  j["result"] = passed ? "pass" : "fail";
  nlohmann::json diffs = nlohmann::json::array();
  std::map<std::string, int> counts{{"numerics", 0}, {"placement", 0}, {"unknown", 0}};
  for (const SettingDiff& d : differences) {
    nlohmann::json x;
    x["setting"] = d.setting;
    x["class"] = class_name(d.cls);
    x["candidate"] = d.candidate ? nlohmann::json(*d.candidate) : nlohmann::json(nullptr);
    x["reference"] = d.reference ? nlohmann::json(*d.reference) : nlohmann::json(nullptr);
    if (!d.note.empty()) x["note"] = d.note;
    diffs.push_back(x);
    ++counts[class_name(d.cls)];
  }
  j["differences"] = diffs;
  j["counts"] = counts;
  j["notes"] = notes;
  return j;
}

}  // namespace quill
