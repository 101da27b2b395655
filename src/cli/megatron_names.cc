#include "cli/megatron_names.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdlib>
#include <optional>

#include "base/error.h"

namespace quill::cli {

namespace {

constexpr const char* kGroup = "Megatron's names (recipe/flag_table.h)";

std::string flag(const char* name) { return std::string("--") + name; }

// A number's text read whole (so "2" and "2.0" are one value), or nothing.
std::optional<double> number(const std::string& s) {
  if (s.empty()) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  return *end == '\0' ? std::optional<double>(v) : std::nullopt;
}

bool same_value(FlagKind kind, const std::string& a, const std::string& b) {
  if (kind == FlagKind::Int || kind == FlagKind::Float) {
    const auto x = number(a), y = number(b);
    if (x && y) return *x == *y;
  }
  return a == b;
}

std::string value_of(const CLI::Option* o) { return fmt::format("{}", fmt::join(o->results(), " ")); }

const char* type_name(FlagKind kind) {
  switch (kind) {
    case FlagKind::Int: return "INT";
    case FlagKind::Float: return "FLOAT";
    default: return "TEXT";
  }
}

}  // namespace

void MegatronNames::add_to(CLI::App* cmd) {
  for (const FlagSpec& spec : flag_table()) {
    const std::string name = flag(spec.name);
    if (cmd->get_option_no_throw(name)) continue;  // quill train's own flag of that name
    const TrainName& t = spec.train;
    Name n{&spec, spec.kind == FlagKind::Switch ? cmd->add_flag(name) : cmd->add_option(name)};
    if (spec.kind == FlagKind::List) n.option->expected(1, CLI::detail::expected_max_vector_size)->allow_extra_args();
    if (spec.kind != FlagKind::Switch) n.option->type_name(type_name(spec.kind));
    switch (t.use) {
      case TrainUse::Alias:
        n.target = cmd->get_option_no_throw(flag(t.option));
        QUILL_CHECK(n.target != nullptr, "flag table: {} is an alias of --{}, which quill train does not have", name,
                    t.option);
        n.option->description("Megatron's name for --" + std::string(t.option))->type_name(n.target->get_type_name());
        n.target_required = n.target->get_required();
        if (n.target_required) {
          n.target->required(false);
          n.target->description(n.target->get_description() + " (required, or as " + name + ")");
        }
        break;
      case TrainUse::Value:
        n.option->description(fmt::format("accepted as {}: {}", t.option, t.note));
        break;
      case TrainUse::Note:
      case TrainUse::CpuNote:
        n.option->description(std::string("accepted: ") + t.note);
        break;
      case TrainUse::Ignored:
        n.option->description(std::string("accepted, not honoured: ") + t.note);
        break;
      case TrainUse::Refused:
      case TrainUse::None:
        break;
    }
    const bool refused = t.use == TrainUse::Refused || t.use == TrainUse::None;
    n.option->group(refused ? "" : kGroup);
    names_.push_back(n);
  }
}

MegatronNames::Resolved MegatronNames::resolve(const std::string& device) const {
  std::vector<std::string> notes, ignored;
  for (const Name& n : names_) {
    const std::string name = flag(n.spec->name);
    const TrainName& t = n.spec->train;
    if (n.option->count() == 0) {
      QUILL_CHECK(!n.target_required || n.target->count() > 0, "--{} is required (or Megatron's {})", t.option, name);
      continue;
    }
    const std::string value = n.spec->kind == FlagKind::Switch ? "" : value_of(n.option);
    const std::string given = value.empty() ? name : name + " " + value;
    switch (t.use) {
      case TrainUse::Alias:
        if (n.target->count() > 0) {
          QUILL_CHECK(same_value(n.spec->kind, value_of(n.target), value),
                      "--{} {} and {}: {} is Megatron's name for --{}, and the two disagree; give one", t.option,
                      value_of(n.target), given, name, t.option);
          break;
        }
        for (const std::string& r : n.option->results()) n.target->add_result(r);
        try {
          n.target->run_callback();  // converts and checks the value as quill's own option would
        } catch (const CLI::Error& e) {
          QUILL_FAIL("{}: {}", given, e.what());
        }
        break;
      case TrainUse::Value:
        QUILL_CHECK(same_value(n.spec->kind, value, t.option), "{}: {}; give {} {} or leave it out", given, t.note,
                    name, t.option);
        break;
      case TrainUse::Note:
        notes.push_back(given + ": " + t.note);
        break;
      case TrainUse::CpuNote:
        if (device == "cpu") notes.push_back(given + ": " + t.note);
        break;
      case TrainUse::Ignored:
        ignored.push_back(name);
        break;
      case TrainUse::Refused:
        QUILL_FAIL("{}: Megatron's flag ({}) has no equivalent in quill train: {}", name, n.spec->meaning, t.note);
      case TrainUse::None:
        QUILL_FAIL("{}: Megatron's flag ({}) has no equivalent in quill train (quill train --help lists its flags)", name,
                   n.spec->meaning);
    }
  }
  return {notes, not_honoured_warning(ignored)};
}

}  // namespace quill::cli
