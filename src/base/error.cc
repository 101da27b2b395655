#include "base/error.h"

namespace quill {

void throw_error(const std::string& message) { throw Error(message); }

}  // namespace quill
