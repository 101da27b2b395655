#include "parallel/tensor_parallel.h"

#include "base/error.h"
#include "base/pass_baton.h"
#include "ops/collective.h"
#include "ops/elementwise.h"

namespace quill {

TensorParallel TensorParallel::of(const Layout& layout) {
  TensorParallel tp;
  tp.comm = layout.comm(GroupKind::TP);
  tp.size = layout.spec().tp;
  tp.rank = layout.coords().tp;
  tp.sequence_parallel = layout.spec().sequence_parallel && tp.size > 1;
  return tp;
}

Tensor TensorParallel::gather_chunks(const DeviceContext& ctx, const Tensor& x_chunk) const {
  if (!active()) return x_chunk;
  Shape shape = x_chunk.shape();
  QUILL_CHECK(!shape.empty(), "tensor parallelism: cannot gather a 0-D tensor");
  shape[0] *= size;
  Tensor full = Tensor::empty(shape, x_chunk.dtype(), *ctx.allocator);
  ops::collective(ctx, "tp.all_gather", full, [&] { comm->all_gather(x_chunk, full); });
  return full;
}

Tensor TensorParallel::reduce_scatter_chunks(const DeviceContext& ctx, const Tensor& x_full) const {
  if (!active()) return x_full;
  Shape shape = x_full.shape();
  QUILL_CHECK(!shape.empty() && shape[0] % size == 0,
              "tensor parallelism: {} rows do not split over --tensor-model-parallel-size {}",
              shape.empty() ? 0 : shape[0], size);
  shape[0] /= size;
  Tensor chunk = Tensor::empty(shape, x_full.dtype(), *ctx.allocator);
  ops::collective(ctx, "tp.reduce_scatter", x_full, [&] { comm->reduce_scatter(x_full, chunk, ReduceOp::Sum); });
  return chunk;
}

void TensorParallel::all_reduce(const DeviceContext& ctx, const Tensor& t) const {
  if (active()) ops::collective(ctx, "tp.all_reduce", t, [&] { comm->all_reduce(t, ReduceOp::Sum); });
}

namespace {
// In a combined step (interleave, sequence parallelism): the started collective travels while the other pass runs.
Tensor finished_after_turn(PendingTp p, PassBaton& baton) {
  baton.yield();
  return TensorParallel::finish(p);
}
}  // namespace

Tensor TensorParallel::gather_input(const DeviceContext& ctx, const Tensor& x) const {
  if (sequence_parallel && interleave) return finished_after_turn(start_gather_input(ctx, x), *interleave);
  return sequence_parallel ? gather_chunks(ctx, x) : x;
}

Tensor TensorParallel::gather_input_backward(const DeviceContext& ctx, const Tensor& dx) const {
  if (sequence_parallel && interleave) return finished_after_turn(start_gather_input_backward(ctx, dx), *interleave);
  if (sequence_parallel) return reduce_scatter_chunks(ctx, dx);
  all_reduce(ctx, dx);
  return dx;
}

Tensor TensorParallel::reduce_output(const DeviceContext& ctx, const Tensor& y) const {
  if (sequence_parallel && interleave) return finished_after_turn(start_reduce_output(ctx, y), *interleave);
  if (sequence_parallel) return reduce_scatter_chunks(ctx, y);
  all_reduce(ctx, y);
  return y;
}

Tensor TensorParallel::reduce_output_backward(const DeviceContext& ctx, const Tensor& dy) const {
  if (sequence_parallel && interleave) return finished_after_turn(start_reduce_output_backward(ctx, dy), *interleave);
  return sequence_parallel ? gather_chunks(ctx, dy) : dy;
}

namespace {

PendingTp done(const Tensor& out) {
  PendingTp p;
  p.out = out;
  return p;
}

}  // namespace

PendingTp TensorParallel::start_gather_input(const DeviceContext& ctx, const Tensor& x) const {
  if (!sequence_parallel) return done(gather_input(ctx, x));
  Shape shape = x.shape();
  shape[0] *= size;
  PendingTp p;
  p.in = x;
  p.out = Tensor::empty(shape, x.dtype(), *ctx.allocator);
  ops::collective(ctx, "tp.all_gather", p.out, [&] { p.handle = comm->start_all_gather(x, p.out); });
  return p;
}

PendingTp TensorParallel::start_gather_input_backward(const DeviceContext& ctx, const Tensor& dx) const {
  if (!sequence_parallel) return done(gather_input_backward(ctx, dx));
  Shape shape = dx.shape();
  QUILL_CHECK(shape[0] % size == 0, "tensor parallelism: {} rows do not split over --tensor-model-parallel-size {}",
              shape[0], size);
  shape[0] /= size;
  PendingTp p;
  p.in = dx;
  p.out = Tensor::empty(shape, dx.dtype(), *ctx.allocator);
  ops::collective(ctx, "tp.reduce_scatter", dx,
                  [&] { p.handle = comm->start_reduce_scatter(dx, p.out, ReduceOp::Sum); });
  return p;
}

PendingTp TensorParallel::start_reduce_output(const DeviceContext& ctx, const Tensor& y) const {
  return sequence_parallel ? start_gather_input_backward(ctx, y) : done(reduce_output(ctx, y));
}

PendingTp TensorParallel::start_reduce_output_backward(const DeviceContext& ctx, const Tensor& dy) const {
  return sequence_parallel ? start_gather_input(ctx, dy) : done(reduce_output_backward(ctx, dy));
}

Tensor TensorParallel::gather_input_pipelined(const DeviceContext& ctx, const Tensor& x,
                                              const std::function<void(const Tensor&, int64_t, int64_t)>& on_chunk) const {
  if (!sequence_parallel) {
    const Tensor full = gather_input(ctx, x);
    on_chunk(full, 0, full.dim(0));
    return full;
  }
  const int64_t Tc = x.dim(0);
  Shape shape = x.shape();
  shape[0] *= size;
  Tensor full = Tensor::empty(shape, x.dtype(), *ctx.allocator);
  ops::copy(ctx, x, full.rows(rank * Tc, (rank + 1) * Tc));
  // Step k: the chunk of rank (rank - k) is here; it goes on to the next rank while the one of rank
  // (rank - k - 1) arrives from the previous, and the consumer reads the one that is here.
  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  for (int k = 0; k < size; ++k) {
    const int64_t have = (rank - k + size) % size;
    std::unique_ptr<CommHandle> step;
    if (k + 1 < size) {
      const int64_t want = (rank - k - 1 + 2 * size) % size;
      const Tensor out = full.rows(have * Tc, (have + 1) * Tc), in = full.rows(want * Tc, (want + 1) * Tc);
      ops::collective(ctx, "tp.all_gather", out, [&] { step = comm->start_send_recv(out, next, in, prev); });
    }
    on_chunk(full, have * Tc, (have + 1) * Tc);
    if (step) step->wait();
  }
  return full;
}

Tensor TensorParallel::reduce_output_pipelined(const DeviceContext& ctx, int64_t T, int64_t C, DType dtype,
                                               const std::function<void(const Tensor&, int64_t, int64_t)>& produce) const {
  if (!sequence_parallel || interleave) {  // (a combined step hands the turn over during the whole reduction)
    Tensor full = Tensor::empty({T, C}, dtype, *ctx.allocator);
    produce(full, 0, T);
    return reduce_output(ctx, full);
  }
  QUILL_CHECK(T % size == 0, "tensor parallelism: {} rows do not split over --tensor-model-parallel-size {}", T, size);
  const int64_t Tc = T / size;
  const int64_t half[2] = {Tc / 2, Tc - Tc / 2};  // rows of each piece in every rank's chunk
  Tensor out = Tensor::empty({Tc, C}, dtype, *ctx.allocator);
  PendingTp pieces[2];
  for (int j = 0; j < 2; ++j) {
    const int64_t m = half[j], first = j == 0 ? 0 : half[0];
    PendingTp& p = pieces[j];
    p.in = Tensor::empty({size * m, C}, dtype, *ctx.allocator);
    p.out = out.rows(first, first + m);
    for (int d = 0; d < size; ++d) produce(p.in.rows(d * m, (d + 1) * m), d * Tc + first, d * Tc + first + m);
    if (m == 0) continue;  // (a chunk of one row: its second piece is all of it)
    ops::collective(ctx, "tp.reduce_scatter", p.in,
                    [&] { p.handle = comm->start_reduce_scatter(p.in, p.out, ReduceOp::Sum); });
  }
  for (PendingTp& p : pieces) finish(p);
  return out;
}

Tensor TensorParallel::finish(PendingTp& p) {
  if (p.handle) p.handle->wait();
  Tensor out = p.out;
  p = PendingTp{};
  return out;
}

Tensor TensorParallel::chunk_of_region(const Tensor& x) const {
  if (!active() || sequence_parallel) return x;
  const int64_t T = x.dim(0);
  QUILL_CHECK(T % size == 0, "tensor parallelism: {} positions do not split over --tensor-model-parallel-size {}", T,
              size);
  return x.rows(chunk_begin(T), chunk_begin(T) + chunk_rows(T));
}

Tensor TensorParallel::chunk_of_region_backward(const DeviceContext& ctx, const Tensor& dx_chunk) const {
  // Without SP the region is replicated: each rank's chunk gradient covers its own positions.
  return !active() || sequence_parallel ? dx_chunk : gather_chunks(ctx, dx_chunk);
}

Tensor TensorParallel::region_of_chunk(const DeviceContext& ctx, const Tensor& y_chunk) const {
  return !active() || sequence_parallel ? y_chunk : gather_chunks(ctx, y_chunk);
}

Tensor TensorParallel::region_of_chunk_backward(const Tensor& dy) const { return chunk_of_region(dy); }

}  // namespace quill
