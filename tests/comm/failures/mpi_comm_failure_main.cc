// A program that fails on purpose under mpirun, one scenario per argument; CTest runs it through
// expect_failure.cmake, which requires a nonzero exit, a message matching a pattern, and an end
// well inside the time limit (no hang).
//   mismatch   rank r all-reduces 10 + 2r elements: every rank stops, naming ranks and operation
//   timeout    rank 1 reaches the barrier 20 s late; rank 0 gives up after 1 s with a message
//   recv_size  rank 0 sends 8 floats, rank 1 receives 6: rank 1 stops on the truncation
//   rank_dies  rank 1 is killed while rank 0 waits in an all-reduce: the launcher stops the job
//   throw      rank 1 throws out of main's body: Distributed::abort stops every rank
//   unwind     rank 1 throws past the Distributed object, which skips MPI_Finalize while
//              unwinding; the process exits 1 unfinalised and the launcher stops rank 0
#include <csignal>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "base/error.h"
#include "comm/distributed.h"
#include "comm/mpi_comm.h"

using namespace quill;

int unwind(int argc, char** argv) {
  try {
    std::unique_ptr<Distributed> dist = init_distributed(&argc, &argv);
    if (dist->rank() == 1) QUILL_FAIL("rank 1 gives up while rank 0 waits in a barrier");
    dist->world().barrier();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "caught after unwinding: %s\n", e.what());
    return 1;
  }
  return 0;
}

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "unwind") return unwind(argc, argv);
  CommOptions options;
  options.timeout_s = mode == "timeout" ? 1 : 30;
  std::unique_ptr<Distributed> dist = init_distributed(&argc, &argv, options);
  MpiComm& world = dist->world();
  const int rank = world.rank();
  try {
    if (mode == "mismatch") {
      Tensor t = Tensor::zeros({10 + 2 * rank}, DType::F32);
      world.all_reduce(t, ReduceOp::Sum);
    } else if (mode == "timeout") {
      if (rank == 1) std::this_thread::sleep_for(std::chrono::seconds(20));
      world.barrier();
    } else if (mode == "recv_size") {
      if (rank == 0) world.send(Tensor::zeros({8}, DType::F32), 1);
      if (rank == 1) world.recv(Tensor::zeros({6}, DType::F32), 0);
    } else if (mode == "rank_dies") {
      if (rank == 1) std::raise(SIGKILL);
      Tensor t = Tensor::zeros({4}, DType::F32);
      world.all_reduce(t, ReduceOp::Sum);
    } else if (mode == "throw") {
      if (rank == 1) QUILL_FAIL("rows file 'x.rows' is truncated");
      world.barrier();
    } else {
      QUILL_FAIL("unknown scenario '{}'", mode);
    }
  } catch (const std::exception& e) {
    dist->abort(e.what());
  }
  std::printf("rank %d: scenario '%s' did not fail\n", rank, mode.c_str());
  return 0;
}
