// A mistyped command line's one line (issue 45). CLI11 answers an unknown flag with "the following
// arguments were not expected" (or, when the flag was a required one mistyped, with the required
// flag's absence), and `quill frobnicate --help` with the main help and status 0; the user needs
// the word that was not understood and the nearest one that would be.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>

namespace quill::cli {

// After app.parse threw `e`: the line naming the first argument that the command being parsed does
// not know, with the nearest known flag (every visible flag of that command, Megatron's names
// included) or subcommand; nothing when all were known, or when `e` is a help request for a known
// command (CLI11's own handling then stands). An unknown word is reported even under --help.
std::optional<std::string> unknown_argument_line(const CLI::App& app, const CLI::ParseError& e);

}  // namespace quill::cli
