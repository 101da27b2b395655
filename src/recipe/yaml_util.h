// YAML helpers of the recipe layer: structural equality, scalar spelling that keeps the meaning
// (a string that would read as a number or a bool is quoted, a float always has a '.' so that YAML
// 1.1 readers such as PyYAML see a float), and a block-style emitter that keeps quoted scalars
// quoted and writes multi-line text as literal blocks.
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>

namespace quill {

// Same kind, same scalars (the same text, read as the same type: '13.0' is not 13.0), same keys in
// the same order.
bool yaml_equal(const YAML::Node& a, const YAML::Node& b);

// A string scalar; quoted on output when a YAML reader would otherwise not read it back as this
// string ("13.0", "true", "null", "").
YAML::Node yaml_string(const std::string& s);
YAML::Node yaml_int(int64_t v);
YAML::Node yaml_double(double v);
YAML::Node yaml_bool(bool v);
// The shortest spelling that reads back as the same double, always with a '.' ("1.0e-05", "0.7", "20.0").
std::string format_double(double v);

// Block-style YAML text of `node` (no trailing document marker).
std::string emit_yaml(const YAML::Node& node);
// One-line flow-style text of `node` (for messages and JSON).
std::string emit_yaml_flow(const YAML::Node& node);

}  // namespace quill
