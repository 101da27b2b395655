#include "comm/error_report.h"

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fmt/format.h>
#include <thread>
#include <vector>

#include "comm/distributed.h"

namespace quill {

namespace {

// FNV-1a: the same on every node (std::hash need not be).
uint64_t fingerprint(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  return h;
}

}  // namespace

int launcher_rank() {
  for (const char* v : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"})
    if (const char* s = std::getenv(v); s && *s) return std::atoi(s);
  return 0;
}

namespace {

// Polls `request` until it completes or `wait_s` passes; true when it completed.
bool wait_for(MPI_Request& request, double wait_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_s);
  int done = 0;
  while (!done && std::chrono::steady_clock::now() < deadline) {
    if (MPI_Test(&request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return false;
    if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return done != 0;
}

// The line for `message` (see report_error), or "" when rank 0 prints the job's line; `finalize` is set
// when every rank initialised MPI here and they should finalise together once the line is out; `agreed` when
// every rank failed alike (rank 0 prints the job's line).
std::string report_line(const std::string& message, double wait_s, bool& finalize, bool& agreed) {
  const std::string plain = "quill: error: " + message;
  if (!launched_by_mpi()) return plain;
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (finalized) return fmt::format("quill: rank {}: error: {}", launcher_rank(), message);
  const bool ours = !initialized;
  if (ours) {
    int provided = 0;
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
      return fmt::format("quill: rank {}: error: {}", launcher_rank(), message);
  }
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const std::string own = fmt::format("quill: rank {} of {}: error: {}", rank, size, message);
  if (size == 1) return plain;
  // Each rank's message fingerprint, and whether it initialised MPI here (before the job's start-up).
  const uint64_t mine[2] = {fingerprint(message), ours ? 1u : 0u};
  std::vector<uint64_t> all(2 * static_cast<size_t>(size));
  MPI_Request request;
  if (MPI_Iallgather(mine, 2, MPI_UINT64_T, all.data(), 2, MPI_UINT64_T, MPI_COMM_WORLD, &request) != MPI_SUCCESS)
    return own;
  // Not every rank reached this in time (one still trains, hangs or died): the error is this rank's own.
  // The request is left pending; the process ends without finalising MPI.
  if (!wait_for(request, wait_s)) return own;
  bool same = true, all_before_startup = true;
  for (int r = 0; r < size; ++r) {
    same = same && all[2 * static_cast<size_t>(r)] == mine[0];
    all_before_startup = all_before_startup && all[2 * static_cast<size_t>(r) + 1] == 1;
  }
  // Every rank failed before the job's start-up and initialised MPI here: they finalise together, so that
  // the launcher reports a plain exit status. Otherwise the job's communicators may hold requests that will
  // never complete, and the process ends without finalising.
  finalize = all_before_startup;
  if (!same) return own;
  agreed = true;
  return rank == 0 ? plain : "";
}

}  // namespace

void report_error(const std::string& message, double wait_s) {
  bool finalize = false, agreed = false;
  const std::string line = report_line(message, wait_s, finalize, agreed);
  if (!line.empty()) std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
  // After the line: a rank that exits first makes the launcher end the job, and rank 0 must not still be about
  // to print (the CI lost the line that way, before the job's start-up and after it). MPI_Finalize waits for
  // every rank; without it (an error after start-up) the ranks meet once rank 0 has printed, and the others then
  // leave rank 0 a moment to exit first, so the launcher forwards its line before it aborts the job.
  if (finalize) {
    MPI_Finalize();
  } else if (agreed) {
    MPI_Request request;
    const bool met = MPI_Ibarrier(MPI_COMM_WORLD, &request) == MPI_SUCCESS && wait_for(request, wait_s);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (met && rank != 0) std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
}

}  // namespace quill
