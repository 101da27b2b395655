// The Megatron/miles flags the recipe layer understands, each with its class
// (recipes-and-measurement.md §5), its value kind and the default that applies when a run is silent
// (Megatron-LM's arguments.py, miles' where miles adds the flag). Two tables in one list:
//   - understood flags, classed numerics (changes the function computed) or placement (changes
//     only where and when work runs);
//   - flags known to be irrelevant to the math (logging, paths, timeouts, Ray, checks), class
//     launcher.
// A flag in neither table is unknown: reported, never assumed placement.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace quill {

enum class SettingClass { Numerics, Placement, Launcher, Unknown };
const char* class_name(SettingClass c);

enum class FlagKind { Switch, Int, Float, String, List };

// How `quill train` takes the flag when a user writes Megatron's name on its command line
// (cli/megatron_names.h). The table is the one place a Megatron name gets its meaning, so that a
// recipe's flags (`quill run`) and a hand-written command line never read one name two ways.
enum class TrainUse {
  None,     // no equivalent; refused by name with the general hint (unless quill train has the name itself)
  Alias,    // quill train's option `option` has the identical meaning (--train-iters -> --steps)
  Value,    // accepted only with the value `option` (quill's fixed behaviour); `note` says why
  Note,     // accepted, changes nothing (quill already does it); `note` is printed
  CpuNote,  // accepted; what it asks is --device cuda's behaviour, so `note` is printed on --device cpu
  Refused,  // no equivalent; `note` says what to use instead
  Ignored,  // accepted, not carried out (a logging service, a launcher's setting); `note` says what quill
            // offers instead. quill train and quill run name every such flag given in one warning line.
};

struct TrainName {
  TrainUse use = TrainUse::None;
  const char* option = nullptr;  // Alias: quill train's option, without "--"; Value: the one value accepted
  const char* note = nullptr;
};

struct FlagSpec {
  const char* name;           // without the leading "--"
  SettingClass cls;
  FlagKind kind;
  const char* default_value;  // when the run is silent; nullptr: no default (unset)
  const char* meaning;
  TrainName train{};          // on quill train's command line
};

const std::vector<FlagSpec>& flag_table();
// The one warning line naming the Ignored flags a run was given ("--use-wandb", ...), in order, once
// each, with what quill offers instead; "" when there are none.
std::string not_honoured_warning(const std::vector<std::string>& flags);
// The spec of `name` (with or without "--"; '_' read as '-'), or nullptr when unknown.
const FlagSpec* find_flag(std::string_view name);

// Class of an environment variable of the recipe's `env` section (NCCL and allocator settings are
// placement, caches and fabric providers launcher, anything else unknown).
SettingClass env_class(std::string_view name);

}  // namespace quill
