#include "cli/count_flags.h"

#include "base/error.h"

namespace quill::cli {

void check_positive(const char* flag, int64_t value) { QUILL_CHECK(value > 0, "{} must be positive, got {}", flag, value); }

void check_not_negative(const char* flag, double value) {
  QUILL_CHECK(value >= 0, "{} must be 0 or more, got {}", flag, value);
}

}  // namespace quill::cli
