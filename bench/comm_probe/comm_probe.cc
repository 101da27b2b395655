// Not a test: the CPU ranks' MPI bandwidth and per-call latency as the communication model takes them
// (docs/comm-model.md), measured through quill's own MpiComm (argument checks on, as `quill train`
// runs it). Under mpirun (every rank runs it); rank 0 prints, per op and size, the median time of a call
// and nccl-tests' bus bandwidth (the ledger's wire bytes / time), then the two model parameters:
//   latency = the mean over the ops of the smallest (8-byte) call; busbw = the wire bytes of every op at
//   256 KiB and 2 MiB (the sizes the small CPU layouts move: activations and gradient buckets) over their
//   time less the latency. One figure for every op, as the model has one per tier; the table shows how
//   far the reductions (the host adds) and the pure moves differ from it.
//   mpirun -np 2 build/tests/comm_probe [--iters N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "comm/collective_ledger.h"
#include "comm/distributed.h"
#include "comm/mpi_comm.h"

namespace {

using Clock = std::chrono::steady_clock;

double median_call_s(quill::Comm& c, int iters, const std::function<void()>& call) {
  for (int i = 0; i < 3; ++i) call();  // warm-up
  std::vector<double> t;
  for (int i = 0; i < iters; ++i) {
    c.barrier();
    const auto a = Clock::now();
    call();
    t.push_back(std::chrono::duration<double>(Clock::now() - a).count());
  }
  std::sort(t.begin(), t.end());
  // Every rank's median, the largest (the call ends for the job when the slowest rank is done).
  quill::Tensor m = quill::Tensor::empty({1}, quill::DType::F64);
  m.data_as<double>()[0] = t[t.size() / 2];
  c.all_reduce(m, quill::ReduceOp::Max);
  return m.data_as<double>()[0];
}

}  // namespace

int main(int argc, char** argv) {
  std::unique_ptr<quill::Distributed> dist = quill::init_distributed(&argc, &argv);
  int iters = 50;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--iters") iters = std::stoi(argv[i + 1]);
  quill::Comm& c = dist->world();
  const int p = c.size();
  const bool lead = c.rank() == 0;
  if (lead) std::printf("%-14s %12s %12s %12s\n", "op", "bytes", "us/call", "busbw GB/s");
  double latency = 0, big_bytes = 0, big_time = 0;
  for (int64_t bytes = 8; bytes <= (int64_t{16} << 20); bytes *= 8) {
    const int64_t n = std::max<int64_t>(p, bytes / 4 / p * p);  // F32 elements, a multiple of p
    const int64_t b = n * 4;
    quill::Tensor x = quill::Tensor::zeros({n}, quill::DType::F32), part = quill::Tensor::zeros({n / p}, quill::DType::F32);
    quill::Tensor y = quill::Tensor::zeros({n}, quill::DType::F32);
    struct Op {
      const char* name;
      int64_t wire;
      std::function<void()> call;
    };
    const int next = (c.rank() + 1) % p, prev = (c.rank() + p - 1) % p;
    const std::vector<int64_t> counts(static_cast<size_t>(p), n / p);
    const Op ops[] = {
        {"all_reduce", quill::ring_all_reduce_bytes(b, p), [&] { c.all_reduce(x, quill::ReduceOp::Sum); }},
        {"all_gather", quill::ring_gather_bytes(b, p), [&] { c.all_gather(part, x); }},
        {"reduce_scatter", quill::ring_gather_bytes(b, p), [&] { c.reduce_scatter(x, part, quill::ReduceOp::Sum); }},
        {"all_to_all", b - b / p, [&] { c.all_to_all(x, counts, y, counts); }},
        {"send_recv", b, [&] { c.send_recv(x, next, y, prev); }},
    };
    for (const Op& op : ops) {
      const double t = median_call_s(c, iters, op.call);
      if (lead) std::printf("%-14s %12lld %12.2f %12.3f\n", op.name, static_cast<long long>(b), 1e6 * t, op.wire / t / 1e9);
      if (bytes == 8) latency += t / 5;
      if (bytes == 262144 || bytes == 2097152) big_bytes += static_cast<double>(op.wire), big_time += t - latency;
    }
  }
  if (lead)
    std::printf("model parameters (%d ranks, one node): --nvlink-latency-us %.2f --nvlink-busbw-gbps %.3f\n", p,
                1e6 * latency, big_bytes / big_time / 1e9);
  return 0;
}
