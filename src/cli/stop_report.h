// What `quill train` says when a signal stopped it (base/stop_signal.h): the step every rank stopped
// at, what was saved where, and the exact command line that continues the run; and its exit status,
// 128 + the signal's number as a shell reports a process the signal ended (143 for SIGTERM, 130 for
// SIGINT), so that a scheduler or script sees the run did not complete.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "train/trainer.h"

namespace quill::cli {

// `args` (this process's command line, args[0] the program) with --load DIR in place of any --load (or
// --resume, the same option) it had, without --ckpt-step (the latest is the checkpoint just saved) and
// without --overwrite (which would remove what is being continued), each word quoted for a POSIX shell
// where it needs it; behind `launcher` ("mpirun -np 2", "") when not empty.
std::string resume_command(const std::vector<std::string>& args, const std::string& load_dir,
                           const std::string& launcher);

// The launcher words to repeat for a job of `world` ranks: "" for one rank, "srun" under Slurm
// (SLURM_JOB_ID set: its own options are the job script's), else "mpirun -np WORLD".
std::string launcher_words(int world);

// The closing lines of a run stopped by a signal (r.stop_signal != 0), ending with a newline; they name
// the command (`quill train`, `quill run`) as args[1] does.
std::string stop_report(const TrainResult& r, const TrainOptions& o, const std::vector<std::string>& args);

inline int stop_exit_status(int signal) { return 128 + signal; }

// The end of a run that ran with o.stop_signal set (base/stop_signal.h's StopSignals installed): one a
// signal stopped prints its report (lead rank) and gives its exit status; one that completed before the
// signal's step boundary says so (lead) and gives nothing: the caller closes it as a completed run.
std::optional<int> finish_if_stopped(const TrainResult& r, const TrainOptions& o, const std::vector<std::string>& args);

}  // namespace quill::cli
