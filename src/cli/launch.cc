// Starting a training job on a device and a data-parallel layout: the one place that knows about
// launchers (mpirun/srun), GPUs and communicators, shared by `quill train` and `quill run`.
#include "cli/launch.h"

#include "base/error.h"
#include "comm/distributed.h"
#include "comm/mpi_comm.h"
#include "parallel/grid.h"
#ifdef QUILL_HAVE_CUDA
#include "comm/nccl/nccl_comm.h"
#include "ops/cuda/cuda_context.h"
#include "ops/cuda/cuda_resources.h"
#endif

namespace quill::cli {

// Runs the training of `o` on `device` with `dp` data-parallel ranks: one process per rank,
// started by mpirun/srun; dp 1 without a launcher is the plain single-process run.
TrainResult train_with_layout(const TrainOptions& o, const std::string& device, int dp) {
  QUILL_CHECK(device == "cpu" || device == "cuda", "--device: '{}' is not cpu or cuda", device);
  QUILL_CHECK(dp >= 1, "--dp must be at least 1, got {}", dp);
  QUILL_CHECK(o.distributed_timeout_minutes > 0, "--distributed-timeout-minutes {}: must be positive",
              o.distributed_timeout_minutes);
  // Megatron's --distributed-timeout-minutes bounds every collective (comm/comm.h: the watchdog).
  CommOptions comm_options;
  comm_options.timeout_s = o.distributed_timeout_minutes * 60;
  std::unique_ptr<Distributed> dist;
  if (dp > 1 || launched_by_mpi()) {
    dist = init_distributed(nullptr, nullptr, comm_options);
    QUILL_CHECK(dist->size() == dp, "--dp {} but the launcher started {} ranks (mpirun -np {})", dp, dist->size(), dp);
  }
  GridSizes sizes;
  sizes.dp = dp;
  const Grid grid(dp, sizes);  // validates the layout against the world
  ParallelContext parallel;
  parallel.dp = dp;
  if (device == "cpu") {
    std::unique_ptr<Comm> dp_comm;
    if (dist) dp_comm = dist->world().split(grid.group(GroupKind::DP, dist->rank()).ranks, "dp");
    parallel.dp_comm = dp_comm.get();
    return run_training(o, DeviceContext::cpu(), parallel);
  }
#ifdef QUILL_HAVE_CUDA
  QUILL_CHECK(cuda_device_available(), "--device cuda: no GPU is visible to this process");
  const int gpu = dist ? select_cuda_device(dist->local_rank(), dist->local_size()) : 0;
  CudaBackend backend(gpu);
  const DeviceContext ctx = backend.context();
  std::unique_ptr<Comm> world_nccl, dp_comm;
  if (dist) {
    world_nccl = NcclComm::create(dist->world(), stream_of(ctx), comm_options);
    dp_comm = world_nccl->split(grid.group(GroupKind::DP, dist->rank()).ranks, "dp");
  }
  parallel.dp_comm = dp_comm.get();
  return run_training(o, ctx, parallel);
#else
  QUILL_FAIL("--device cuda: this quill was built without the CUDA backend");
#endif
}

std::string default_device() {
#ifdef QUILL_HAVE_CUDA
  if (cuda_device_available()) return "cuda";
#endif
  return "cpu";
}

std::string device_description(const std::string& device) {
#ifdef QUILL_HAVE_CUDA
  if (device == "cuda" && cuda_device_available()) return cuda_device_name(0);
#endif
  return device == "cuda" ? "CUDA (no GPU visible)" : "CPU (fp32 reference backend)";
}

}  // namespace quill::cli
