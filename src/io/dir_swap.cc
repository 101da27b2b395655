#include "io/dir_swap.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "base/error.h"

namespace quill {

namespace fs = std::filesystem;

namespace {

struct SideDir {
  fs::path path;
  char kind;  // 't' (.tmp-), 'n' (.new-), 'o' (.old-)
  long pid;
  fs::file_time_type mtime;
};

// The parent directory and the base name of dir ("a/b/checkpoint/" -> "a/b", "checkpoint").
std::pair<fs::path, std::string> split(const std::string& dir) {
  fs::path p = fs::path(dir).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  fs::path parent = p.parent_path();
  return {parent.empty() ? fs::path(".") : parent, p.filename().string()};
}

std::vector<SideDir> side_dirs(const std::string& dir) {
  const auto [parent, base] = split(dir);
  std::vector<SideDir> out;
  std::error_code ec;
  if (!fs::is_directory(parent, ec)) return out;
  for (const fs::directory_entry& e : fs::directory_iterator(parent, ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() <= base.size() + 5 || name.compare(0, base.size(), base) != 0) continue;
    const std::string tag = name.substr(base.size(), 5);
    const std::string digits = name.substr(base.size() + 5);
    if (digits.empty() || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
      continue;
    char kind = tag == ".tmp-" ? 't' : tag == ".new-" ? 'n' : tag == ".old-" ? 'o' : 0;
    if (!kind || !e.is_directory(ec)) continue;
    out.push_back({e.path(), kind, std::stol(digits), fs::last_write_time(e.path(), ec)});
  }
  return out;
}

bool process_runs(long pid) {
  if (pid <= 0) return false;
  return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
}

void rename_or_fail(const fs::path& from, const fs::path& to) {
  if (::rename(from.c_str(), to.c_str()) != 0)
    QUILL_FAIL("{}: cannot rename to {} ({})", from.string(), to.string(), std::strerror(errno));
}

std::string side_name(const std::string& dir, const char* tag) {
  fs::path p = fs::path(dir).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  return p.string() + tag + std::to_string(::getpid());
}

}  // namespace

void fsync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

std::string temp_dir_name(const std::string& dir) { return side_name(dir, ".tmp-"); }

void swap_dir_into_place(const std::string& tmp, const std::string& dir) {
  const std::string fresh = side_name(dir, ".new-"), old = side_name(dir, ".old-");
  std::error_code ec;
  fs::remove_all(fresh, ec);
  fs::remove_all(old, ec);
  rename_or_fail(tmp, fresh);
  const fs::path parent = split(dir).first;
  fsync_dir(parent);  // the ".new-" name is durable before the old copy moves aside
  if (fs::exists(dir) && fs::is_directory(dir) && fs::is_empty(dir)) fs::remove(dir);
  const bool had_old = fs::exists(dir);
  if (had_old) rename_or_fail(dir, old);
  try {
    rename_or_fail(fresh, dir);
  } catch (...) {
    if (had_old) fs::rename(old, dir, ec);  // put the old one back; the new one stays as ".new-"
    throw;
  }
  fsync_dir(parent);
  if (had_old) fs::remove_all(old, ec);
}

std::optional<std::string> recover_dir(const std::string& dir) {
  if (fs::exists(dir)) return std::nullopt;
  std::vector<SideDir> all = side_dirs(dir);
  const SideDir* best = nullptr;
  for (const SideDir& s : all) {
    if (s.kind == 't') continue;  // may be partial
    const bool better = !best || (s.kind == 'n' && best->kind == 'o') ||
                        (s.kind == best->kind && s.mtime > best->mtime);
    if (better) best = &s;
  }
  if (!best) return std::nullopt;
  const std::string from = best->path.string();
  rename_or_fail(best->path, dir);
  fsync_dir(split(dir).first);
  return from;
}

std::vector<std::string> remove_stale_side_dirs(const std::string& dir) {
  std::vector<std::string> removed;
  for (const SideDir& s : side_dirs(dir)) {
    if (s.pid != ::getpid() && process_runs(s.pid)) continue;  // another live writer's
    std::error_code ec;
    fs::remove_all(s.path, ec);
    QUILL_CHECK(!ec, "{}: cannot remove a killed run's leftover ({})", s.path.string(), ec.message());
    removed.push_back(s.path.string());
  }
  return removed;
}

}  // namespace quill
