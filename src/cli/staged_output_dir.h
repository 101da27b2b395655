// A directory that a command writes whole (`quill data build --out`, `quill data synth --out`).
//
// An existing non-empty DIR is refused before any work unless the command's --overwrite is given:
// new rows mixed into old ones, or a run directory replaced by rows, would otherwise be lost without
// a word. The command writes into DIR.tmp-<pid> (staging()); commit() swaps that into place
// (io/dir_swap.h), so that a failure or a kill never leaves DIR partial or the old DIR half replaced.
// Without commit() (the command failed) the staging directory is removed and DIR is left as it was.
#pragma once

#include <string>

namespace quill::cli {

class StagedOutputDir {
 public:
  // Checks DIR (given with `flag`, e.g. "--out") before the command's work: refused when it exists and
  // is not a directory, or is a non-empty directory and `overwrite` is false. Also puts back a DIR that a
  // killed earlier swap left aside, and removes the staging directories of processes that no longer run.
  StagedOutputDir(std::string dir, const std::string& flag, bool overwrite);
  ~StagedOutputDir();
  StagedOutputDir(const StagedOutputDir&) = delete;
  StagedOutputDir& operator=(const StagedOutputDir&) = delete;

  // Where the command writes: DIR.tmp-<pid>.
  const std::string& staging() const { return staging_; }
  // The command succeeded: the staging directory becomes DIR (an earlier DIR is replaced).
  void commit();

 private:
  std::string dir_, staging_;
  bool committed_ = false;
};

}  // namespace quill::cli
