// The reader of a recipe's `run:` script: a small POSIX-shell reader (quotes, backslash
// continuations, comments, `export`, assignments, bash arrays `NAME=(...)` and `read -ra NAME <<<
// "$X"`, `$VAR`/`${VAR}`/`${VAR:-default}` expansion) that finds the training command (the command
// with the most `--flags`; after a bare `--` when a launcher wraps it) and lists its flags.
//
// Variables take their values from, in order: the `--set NAME=VALUE` map (which also overrides the
// script's own assignments), the script's assignments and exports, the recipe's `env` section.
// A value the reader cannot know (the output of `$(...)`, a variable set nowhere) stays as written
// and is reported; an array whose words cannot be known (`"${MODEL_ARGS[@]}"` read from a command's
// output) is reported with where it comes from. Nothing is silently dropped: flags in neither table
// of flag_table.h are listed as unknown.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "recipe/flag_table.h"

namespace quill {

using VarMap = std::map<std::string, std::string>;

struct ParsedFlag {
  std::string name;                     // without the leading "--", as written
  std::vector<std::string> values;      // after expansion; empty for a switch
  std::vector<std::string> unresolved;  // variables (or $(...)) its values use that have no known value
  const FlagSpec* spec = nullptr;       // nullptr: unknown
  SettingClass cls() const { return spec ? spec->cls : SettingClass::Unknown; }
  std::string value() const;            // the values joined by spaces; "" for a switch
};

struct UnexpandedArray {
  std::string name;    // MODEL_ARGS
  std::string source;  // where its words come from ("the output of `python3 ...`")
};

struct RunFlags {
  bool found = false;                     // a command with flags was found
  std::string program;                    // the words before the first flag ("python3 train.py")
  std::vector<ParsedFlag> flags;          // in order; expanded arrays spliced in
  std::vector<UnexpandedArray> unexpanded;
  std::vector<std::string> unresolved;    // variables with no value used by the training command
  std::vector<std::string> unknown;       // flags in neither table ("--name"), in order, once each
  std::vector<std::string> problems;      // repeated flags, stray words
  VarMap variables;                       // the known variables after the script ran
  VarMap exported;                        // what the script exports to the training command's environment
                                          // (`export`, and assignments written before the command), as
                                          // expanded (an unknown part stays as written)

  // The last occurrence of a flag (argparse: the last wins), or nullptr.
  const ParsedFlag* find(std::string_view name) const;
};

// Reads the script. `env`: the recipe's env section; `set`: values given by the user (--set).
RunFlags parse_run_flags(const std::string& script, const VarMap& env = {}, const VarMap& set = {});

// "NAME=VALUE" -> {NAME, VALUE}; a quill::Error naming the argument when there is no '='.
std::pair<std::string, std::string> parse_assignment(const std::string& arg);

}  // namespace quill
