// MPI start-up and shut-down, and the local rank.
#include "comm/distributed.h"

#include <exception>
#include <cstdio>
#include <cstdlib>

#include "base/error.h"
#include "comm/mpi_comm.h"

namespace quill {

namespace {

bool env_int(const char* name, int* value) {
  const char* s = std::getenv(name);
  if (!s || !*s) return false;
  char* end = nullptr;
  long v = std::strtol(s, &end, 10);
  if (*end != '\0' || v < 0) return false;
  *value = static_cast<int>(v);
  return true;
}

}  // namespace

int mpi_world_rank() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return -1;
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"})
    if (std::getenv(v)) return true;
  return std::getenv("SLURM_PROCID") && std::getenv("SLURM_STEP_NUM_TASKS");
}

std::unique_ptr<Distributed> init_distributed(int* argc, char*** argv, CommOptions world_options) {
  // NVLink multicast (NVLS) can take a shared host's GPUs out of service; off unless asked for.
  setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);

  std::unique_ptr<Distributed> d(new Distributed);
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    const int rc = MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
    QUILL_CHECK(rc == MPI_SUCCESS, "MPI_Init_thread failed (error {})", rc);
    d->owns_mpi_ = true;
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &d->rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &d->size_);
  d->world_ = std::make_unique<MpiComm>(MPI_COMM_WORLD, "world", world_options);

  // The launcher's own numbering first (it also decided CPU binding), then shared memory.
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(d->world_->handle(), MPI_COMM_TYPE_SHARED, d->rank_, MPI_INFO_NULL, &node);
  int node_rank = 0, node_size = 1;
  MPI_Comm_rank(node, &node_rank);
  MPI_Comm_size(node, &node_size);
  MPI_Comm_free(&node);
  d->local_rank_ = node_rank;
  d->local_size_ = node_size;
  d->local_rank_source_ = "MPI_Comm_split_type";
  for (const char* v : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID"}) {
    int value = 0;
    if (env_int(v, &value)) {
      d->local_rank_ = value;
      d->local_rank_source_ = v;
      break;
    }
  }
  return d;
}

Distributed::~Distributed() {
  if (std::uncaught_exceptions() > 0) return;  // see distributed.h: no MPI_Finalize while unwinding
  world_.reset();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (owns_mpi_ && !finalized) MPI_Finalize();
}

void Distributed::abort(const std::string& message) const {
  MpiComm::abort_job(fmt::format("rank {} of {}: {}", rank_, size_, message));
}

}  // namespace quill
