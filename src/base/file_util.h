// Files written safely: to a temporary name in the same folder, then renamed, so a failure
// never leaves a partial file under the final name.
#pragma once

#include <string>
#include <string_view>

namespace quill {

std::string read_file(const std::string& path);
// Writes `bytes` to path + ".tmp.<pid>", fsyncs, renames onto `path`. flush false skips the
// fsync: only for a file whose reader verifies it whole (after a crash the new name may hold a
// torn file; a cache that is then rebuilt), where the flush would cost more than the write.
void write_file_atomic(const std::string& path, std::string_view bytes, bool flush = true);
// Creates a directory and its parents; no error if it exists.
void make_dirs(const std::string& path);
bool path_exists(const std::string& path);
// Lowercase hex SHA-256 of bytes.
std::string sha256_hex(std::string_view bytes);

}  // namespace quill
