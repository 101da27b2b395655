// Megatron's flag names on `quill train`'s command line (issue 45). `quill run` reads a recipe's
// Megatron flags through the recipe layer's table (recipe/flag_table.h); quill train reads the same
// names through the same table, so a name never means two things: each table flag that quill train
// does not already have under that name is registered, and after the parse it is taken the way its
// entry's TrainName says (an alias hands its value to quill's option of identical meaning, a fixed
// value is checked, a note is printed, a flag without equivalent is refused with what to use instead, and
// the flags accepted but not honoured are named together in one warning).
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "recipe/flag_table.h"

namespace quill::cli {

class MegatronNames {
 public:
  // Registers the names on `cmd`, after its own options (a name it has is quill's, never re-read).
  // Aliases, fixed values and notes are listed under "Megatron's names" in --help; refused ones are
  // hidden (and so never suggested for a typo). A required option that has an alias is required by
  // resolve() instead, under either name.
  void add_to(CLI::App* cmd);

  // After the parse, on the device the run uses: hands aliases' values over, refuses what the table
  // refuses (a quill::Error naming the flag; the quill name and its alias with different values name
  // both), and returns the notes to print and the one warning naming every flag given that is accepted
  // but not honoured (empty: none).
  struct Resolved {
    std::vector<std::string> notes;
    std::string not_honoured;
  };
  Resolved resolve(const std::string& device) const;

 private:
  struct Name {
    const FlagSpec* spec;
    CLI::Option* option;            // Megatron's name
    CLI::Option* target = nullptr;  // an alias's quill option
    bool target_required = false;   // the quill option was required before its alias existed
  };
  std::vector<Name> names_;
};

}  // namespace quill::cli
