// How a failed `quill` process reports its error (issue 45): under a launcher (mpirun, srun), when every
// rank of the job fails with the same message (a bad flag, a missing file: every rank checks the same
// input), only world rank 0 prints it; a rank whose error is its own (another message, or its peers did
// not fail with it in time) prints it with its rank, so that it reaches the log named.
#pragma once

#include <string>

namespace quill {

// Prints this process's `message` on stderr ("quill: error: ..." or "quill: rank R of N: error: ..."), or
// nothing when rank 0 prints the job's one line. Under a launcher the ranks compare their messages over
// MPI_COMM_WORLD (the job's communicators are duplicates of it, so none of their collectives can match
// this one), waiting at most `wait_s` for the others; MPI is initialised (and finalised) here when the
// error came before the job's start-up did. Without a launcher: no waiting.
void report_error(const std::string& message, double wait_s = 5);

// This process's rank as the launcher numbered it (its environment), before MPI is initialised; 0 without
// a launcher. For lines every rank would otherwise print before start-up (notes about flags).
int launcher_rank();

}  // namespace quill
