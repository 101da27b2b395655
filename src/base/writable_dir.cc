#include "base/writable_dir.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "base/error.h"

namespace quill {

namespace fs = std::filesystem;

void check_dir_writable(const std::string& flag, const std::string& value, const std::string& dir) {
  std::error_code ec;
  fs::path place = fs::path(dir).lexically_normal();
  if (place.empty()) place = ".";
  if (fs::exists(place, ec)) {
    QUILL_CHECK(fs::is_directory(place, ec), "{} {}: {}exists and is not a directory", flag, value,
                place == fs::path(value).lexically_normal() ? "" : place.string() + " ");
  } else {
    // It will be created (with its missing parents) inside the nearest directory that exists.
    while (!place.empty() && !fs::exists(place, ec)) place = place.parent_path();
    if (place.empty()) place = ".";
    QUILL_CHECK(fs::is_directory(place, ec), "{} {}: cannot be created, as {} is not a directory", flag, value,
                place.string());
  }
  std::string probe = (place / ".quill-write-probe-XXXXXX").string();
  const int fd = ::mkstemp(probe.data());
  QUILL_CHECK(fd >= 0, "{} {}: cannot create a file in {} ({})", flag, value, place.string(), std::strerror(errno));
  ::close(fd);
  ::unlink(probe.c_str());
}

}  // namespace quill
