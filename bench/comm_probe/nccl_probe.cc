// Not a test: NCCL's own bus bandwidth per operation, group size and size on this node's GPUs, the
// figure issue 25's report sets each profiled collective against (ops/comm_profile.h). Measured as
// nccl-tests measures (its doc/PERFORMANCE.md): a few warm-up calls, then `iters` calls (fewer for
// buffers over ~100 MB: at least 3, about 2 GB moved) back to back between two synchronisations, the
// mean time per call, the slowest rank's; algbw = size / time and busbw = the ring algorithm's bytes per rank / time (collective_ledger.h), so that busbw means the
// same here as in the profile. Through quill's NcclComm (per call: one event wait, one record).
// Ranks are split into consecutive groups of each size (ranks 0..g-1, g..2g-1, ...), all running at
// once, as the layouts' tensor-parallel groups do.
//   mpirun -np 2 nccl_probe --sizes 1048576,67108864 [--group-sizes 2] [--ops all_gather,reduce_scatter]
//          [--dtype bf16|f32] [--iters 20] [--json FILE]
// Sizes are in bytes, as nccl-tests' "size": all_reduce and broadcast the buffer, all_gather the
// whole output, reduce_scatter the whole input, all_to_all the send total, send_recv the message.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "comm/collective_ledger.h"
#include "comm/distributed.h"
#include "comm/mpi_comm.h"
#include "comm/nccl/nccl_comm.h"
#include "ops/cuda/cuda_context.h"
#include "ops/cuda/cuda_resources.h"

namespace {

using quill::DType;
using quill::Tensor;

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

struct Options {
  std::vector<int64_t> sizes;
  std::vector<int> group_sizes;
  std::vector<std::string> ops = {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"};
  DType dtype = DType::BF16;
  int iters = 20;
  std::string json;
};

// A whole, non-negative number for `flag`, or an error naming the flag and the text.
int64_t parse_count(const std::string& flag, const std::string& text) {
  size_t end = 0;
  int64_t v = -1;
  try {
    v = std::stoll(text, &end);
  } catch (const std::exception&) {
    end = 0;
  }
  QUILL_CHECK(end == text.size() && v >= 0, "nccl_probe: {}: '{}' is not a whole number", flag, text);
  return v;
}

Options parse(int argc, char** argv, int world) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    QUILL_CHECK(i + 1 < argc, "nccl_probe: {} needs a value", a);
    const std::string v = argv[++i];
    if (a == "--sizes") {
      for (const std::string& s : split_list(v)) o.sizes.push_back(parse_count(a, s));
    } else if (a == "--group-sizes") {
      for (const std::string& s : split_list(v)) o.group_sizes.push_back(static_cast<int>(parse_count(a, s)));
    } else if (a == "--ops") {
      o.ops = split_list(v);
    } else if (a == "--dtype") {
      QUILL_CHECK(v == "bf16" || v == "f32", "nccl_probe: --dtype {}: bf16 or f32", v);
      o.dtype = v == "bf16" ? DType::BF16 : DType::F32;
    } else if (a == "--iters") {
      o.iters = static_cast<int>(parse_count(a, v));
    } else if (a == "--json") {
      o.json = v;
    } else {
      QUILL_FAIL("nccl_probe: unknown argument {} (--sizes, --group-sizes, --ops, --dtype, --iters, --json)", a);
    }
  }
  QUILL_CHECK(!o.sizes.empty(), "nccl_probe: --sizes is required (bytes, comma-separated)");
  if (o.group_sizes.empty()) o.group_sizes.push_back(world);
  for (int g : o.group_sizes)
    QUILL_CHECK(g >= 2 && world % g == 0, "nccl_probe: --group-sizes {}: needs 2 or more ranks dividing the {} ranks", g, world);
  QUILL_CHECK(o.iters >= 1, "nccl_probe: --iters must be positive");
  return o;
}

}  // namespace

int probe(quill::Distributed* dist, int argc, char** argv);

// A bad argument or a failed call ends the job with one line naming it (every rank parses the same
// arguments; a rank whose device fails takes the others down instead of leaving them in a collective).
int main(int argc, char** argv) {
  std::unique_ptr<quill::Distributed> dist = quill::init_distributed(&argc, &argv);
  try {
    return probe(dist.get(), argc, argv);
  } catch (const std::exception& e) {
    quill::MpiComm::abort_job(e.what());
  }
}

int probe(quill::Distributed* dist, int argc, char** argv) {
  quill::Comm& world = dist->world();
  const Options o = parse(argc, argv, world.size());
  const bool lead = world.rank() == 0;
  quill::CudaBackend backend(quill::select_cuda_device(dist->local_rank(), dist->local_size()));
  const quill::DeviceContext ctx = backend.context();
  const cudaStream_t stream = quill::stream_of(ctx);
  std::unique_ptr<quill::NcclComm> all = quill::NcclComm::create(world, stream, {}, "world", quill::comm_stream_of(ctx));
  const int64_t es = static_cast<int64_t>(quill::dtype_size(o.dtype));
  std::ofstream json;
  if (lead && !o.json.empty()) json.open(o.json);
  if (lead)
    std::printf("%-15s %6s %14s %12s %12s %12s\n", "op", "ranks", "bytes", "us/call", "algbw GB/s", "busbw GB/s");
  for (int g : o.group_sizes) {
    std::vector<int> members;
    for (int r = world.rank() / g * g; r < world.rank() / g * g + g; ++r) members.push_back(r);
    std::unique_ptr<quill::Comm> owned = g == world.size() ? nullptr : all->split(members, "g" + std::to_string(g));
    quill::Comm& c = owned ? *owned : *all;
    const int me = c.rank(), next = (me + 1) % g, prev = (me + g - 1) % g;
    for (int64_t bytes : o.sizes) {
      const int64_t n = std::max<int64_t>(g, bytes / es / g * g);  // elements, a multiple of the group
      const int64_t b = n * es;
      Tensor x = Tensor::empty({n}, o.dtype, *ctx.allocator), y = Tensor::empty({n}, o.dtype, *ctx.allocator);
      Tensor part = Tensor::empty({n / g}, o.dtype, *ctx.allocator);
      QUILL_CHECK(cudaMemset(x.data(), 0, x.nbytes()) == cudaSuccess && cudaMemset(y.data(), 0, y.nbytes()) == cudaSuccess &&
                      cudaMemset(part.data(), 0, part.nbytes()) == cudaSuccess,
                  "nccl_probe: cudaMemset failed");
      const std::vector<int64_t> counts(static_cast<size_t>(g), n / g);
      for (const std::string& op : o.ops) {
        std::function<void()> call;
        int64_t bus = 0;
        if (op == "all_reduce") {
          call = [&] { c.all_reduce(x, quill::ReduceOp::Sum); }, bus = quill::ring_all_reduce_bytes(b, g);
        } else if (op == "all_gather") {
          call = [&] { c.all_gather(part, x); }, bus = quill::ring_gather_bytes(b, g);
        } else if (op == "reduce_scatter") {
          call = [&] { c.reduce_scatter(x, part, quill::ReduceOp::Sum); }, bus = quill::ring_gather_bytes(b, g);
        } else if (op == "all_to_all") {
          call = [&] { c.all_to_all(x, counts, y, counts); }, bus = b - b / g;
        } else if (op == "send_recv") {
          call = [&] { c.send_recv(x, next, y, prev); }, bus = b;
        } else if (op == "broadcast") {
          call = [&] { c.broadcast(x, 0); }, bus = b;
        } else {
          QUILL_FAIL("nccl_probe: --ops {}: not one of all_reduce, all_gather, reduce_scatter, all_to_all, send_recv, broadcast", op);
        }
        // Buffers of gigabytes (a whole model's gradients) take fewer calls: at least 3, about 2 GB moved.
        const int iters = static_cast<int>(std::clamp<int64_t>((int64_t{2} << 30) / b, 3, o.iters));
        for (int i = 0; i < std::min(iters, 5); ++i) call();
        c.barrier();
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < iters; ++i) call();
        QUILL_CHECK(cudaStreamSynchronize(stream) == cudaSuccess, "nccl_probe: {} failed on the stream", op);
        double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
        Tensor m = Tensor::empty({1}, DType::F64);
        m.data_as<double>()[0] = t;
        world.all_reduce(m, quill::ReduceOp::Max);  // the slowest rank's (every group's)
        t = m.data_as<double>()[0];
        if (!lead) continue;
        std::printf("%-15s %6d %14lld %12.2f %12.2f %12.2f\n", op.c_str(), g, static_cast<long long>(b), 1e6 * t, b / t / 1e9,
                    bus / t / 1e9);
        if (json.is_open())
          json << "{\"op\": \"" << op << "\", \"group_size\": " << g << ", \"bytes\": " << b << ", \"dtype\": \""
               << (o.dtype == DType::BF16 ? "bf16" : "f32") << "\", \"us\": " << 1e6 * t << ", \"algbw_gbps\": " << b / t / 1e9
               << ", \"busbw_gbps\": " << bus / t / 1e9 << "}\n";
      }
    }
  }
  return 0;
}
