// Counts and limits given on the command line (tokens per row, rows per step, layouts to print, seconds):
// one message for a value out of range whatever the command, naming the flag and the value given, e.g.
// "--row-tokens must be positive, got 0", instead of a message about something else or a silent default.
#pragma once

#include <cstdint>

namespace quill::cli {

void check_positive(const char* flag, int64_t value);
void check_not_negative(const char* flag, double value);

}  // namespace quill::cli
