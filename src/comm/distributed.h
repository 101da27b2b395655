// Launch: one process per GPU (or per CPU rank), started by `mpirun -np N quill ...` or by Slurm's
// `srun` (MPI_Init reads PMIx/PMI either way). Distributed owns MPI's lifetime and the world
// communicator, and says which local rank (and so which GPU) this process is.
//
//   int main(int argc, char** argv) {
//     std::unique_ptr<Distributed> dist = init_distributed(&argc, &argv);
//     try { ... use dist->world(), dist->local_rank() ... }
//     catch (const std::exception& e) { dist->abort(e.what()); }  // stops every rank, message first
//   }
//
// Communicators made from world() must be destroyed before the Distributed object. If it is
// destroyed while an exception propagates, it skips MPI_Finalize (which would wait for ranks that
// may be stuck in a collective): the process then exits without finalising and the launcher
// stops the other ranks.
#pragma once

#include <memory>
#include <string>

#include "comm/comm.h"

namespace quill {

class MpiComm;

class Distributed {
 public:
  ~Distributed();
  Distributed(const Distributed&) = delete;
  Distributed& operator=(const Distributed&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // This process's index among the ranks on its node, and how many ranks share the node.
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  // Where local_rank came from: "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID"
  // or "MPI_Comm_split_type" (shared-memory neighbours, when no launcher variable is set).
  const std::string& local_rank_source() const { return local_rank_source_; }

  MpiComm& world() { return *world_; }

  // Prints "quill: rank R of N: <message>" and ends every rank of the job.
  [[noreturn]] void abort(const std::string& message) const;

 private:
  friend std::unique_ptr<Distributed> init_distributed(int*, char***, CommOptions);
  Distributed() = default;

  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  std::string local_rank_source_;
  bool owns_mpi_ = false;
  std::unique_ptr<MpiComm> world_;
};

// Initialises MPI (MPI_THREAD_MULTIPLE, so a communicator's watchdog thread may end the job), or
// adopts an MPI someone else initialised. Sets NCCL_NVLS_ENABLE=0 unless it is set (NVLink
// multicast stays off). `world_options` configure the world communicator (timeout, checks).
std::unique_ptr<Distributed> init_distributed(int* argc = nullptr, char*** argv = nullptr, CommOptions world_options = {});

// This process's rank in MPI's world once MPI is initialised (and not finalised), else -1.
int mpi_world_rank();

// True when a launcher (mpirun/mpiexec, srun) started this process, so that the caller can
// choose between init_distributed() and a plain single-process run.
bool launched_by_mpi();

}  // namespace quill
