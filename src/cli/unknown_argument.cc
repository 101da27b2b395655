#include "cli/unknown_argument.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <string_view>
#include <vector>

#include "cli/nearest_name.h"

namespace quill::cli {

namespace {

std::string without_dashes(std::string_view s) {
  while (!s.empty() && s.front() == '-') s.remove_prefix(1);
  return std::string(s.substr(0, s.find('=')));  // --name=value names --name
}

// The flags a user is meant to write: the long names of options in a group (hidden ones have none,
// so that a test-only or refused name is never suggested).
std::vector<std::string> visible_flags(const CLI::App& cmd) {
  std::vector<std::string> names;
  for (const CLI::Option* o : cmd.get_options([](const CLI::Option* opt) { return !opt->get_group().empty(); }))
    for (const std::string& name : o->get_lnames()) names.push_back(name);
  return names;
}

std::vector<std::string> subcommand_names(const CLI::App& cmd) {
  std::vector<std::string> names;
  for (const CLI::App* sub : cmd.get_subcommands([](const CLI::App* s) { return !s->get_name().empty(); }))
    names.push_back(sub->get_name());
  return names;
}

}  // namespace

std::optional<std::string> unknown_argument_line(const CLI::App& app, const CLI::ParseError& e) {
  // A help request still names an unknown command (`quill frobnicate --help` would print the main
  // help and succeed), but not an unknown flag beside the help (the help is what was asked).
  const bool help = dynamic_cast<const CLI::Success*>(&e) != nullptr;
  // The command whose arguments were being read: the deepest subcommand parsed.
  const CLI::App* cmd = &app;
  std::string path = "quill";
  while (!cmd->get_subcommands().empty()) {
    cmd = cmd->get_subcommands().front();
    path += " " + cmd->get_name();
  }
  if (cmd->get_allow_extras()) return std::nullopt;  // it takes what it does not know (quill run's recipe flags)
  const std::string where = cmd == &app ? "" : path + ": ";  // the line starts "quill: error: " already
  const std::vector<std::string> commands = subcommand_names(*cmd);
  for (const std::string& arg : cmd->remaining()) {
    if (arg.size() > 1 && arg.front() == '-') {
      if (help) continue;
      const std::string name = without_dashes(arg);
      if (const auto near = nearest_name(name, visible_flags(*cmd)))
        return fmt::format("{}unknown flag --{}; did you mean --{}?", where, name, *near);
      return fmt::format("{}unknown flag --{} ({} --help lists its flags)", where, name, path);
    }
    if (commands.empty()) continue;  // a stray value: CLI11's own message names it
    if (const auto near = nearest_name(arg, commands))
      return fmt::format("{}unknown command '{}'; did you mean '{} {}'?", where, arg, path, *near);
    return fmt::format("{}unknown command '{}' (the commands: {})", where, arg, fmt::join(commands, ", "));
  }
  return std::nullopt;
}

}  // namespace quill::cli
