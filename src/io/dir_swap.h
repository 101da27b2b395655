// Replacing a directory (a training checkpoint, a Hugging Face export) by a complete new one so
// that a process killed at any moment leaves one complete copy that the next run finds.
//
// The writer fills DIR.tmp-<pid> (never trusted: it may be partial). swap_dir_into_place then
//   1. renames DIR.tmp-<pid> -> DIR.new-<pid>   (the name itself says "complete")
//   2. renames DIR -> DIR.old-<pid>             (when DIR exists)
//   3. renames DIR.new-<pid> -> DIR
//   4. removes DIR.old-<pid>
// A kill between 2 and 3 leaves no DIR, only DIR.new-<pid> and DIR.old-<pid>; recover_dir puts the
// newest complete one (a .new-, else an .old-) back as DIR. A .tmp- is never recovered.
// Side directories of processes that no longer run are removed by remove_stale_side_dirs (a
// killed writer's DIR.tmp-<pid> is a leak the size of the checkpoint).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace quill {

// Makes a directory's entries (a rename into it) durable; best effort (some file systems refuse).
void fsync_dir(const std::string& dir);
// "DIR.tmp-<pid of this process>".
std::string temp_dir_name(const std::string& dir);
// Steps 1-4 above. `tmp` must be a complete directory; an existing empty DIR is simply replaced.
void swap_dir_into_place(const std::string& tmp, const std::string& dir);
// When DIR is missing: renames the newest complete side directory to DIR and returns its old
// name; nothing (and no change) when DIR exists or no complete side directory does.
std::optional<std::string> recover_dir(const std::string& dir);
// Removes DIR.tmp-<pid>, DIR.new-<pid> and DIR.old-<pid> of pids that run no process here, and of
// this process itself (a container's pids repeat across restarts): call after recover_dir and before
// this process writes any. Returns what it removed.
std::vector<std::string> remove_stale_side_dirs(const std::string& dir);

}  // namespace quill
