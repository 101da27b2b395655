// The collectives around tensor-parallel layers (Megatron's mappings, megatron/core/tensor_parallel/
// mappings.py), so that layer code reads as single-device code with a call at each boundary.
//
// A decoder layer alternates two regions. In the *sequence region* (norms, residual adds, the
// residual short convolutions) every tensor-parallel rank holds the row's activations: all T
// positions without sequence parallelism (replicated), its chunk of T/tp consecutive positions
// with it. In the *split region* (between a column-parallel GEMM and the row-parallel GEMM after
// it) every rank holds all T positions of its share of heads or FFN columns.
//
//   region -> split:   gather_input   (SP: all-gather the chunks;       else the same tensor)
//     its backward:    gather_input_backward  (SP: reduce-scatter;      else all-reduce)
//   split -> region:   reduce_output  (SP: reduce-scatter the partial sums; else all-reduce)
//     its backward:    reduce_output_backward (SP: all-gather;          else the same tensor)
//
// The routed experts (expert tensor parallelism 1) work on the rank's own chunk of positions in
// both modes: chunk_of_region / region_of_chunk convert (without SP: a slice of rows, and an
// all-gather). gather_chunks / reduce_scatter_chunks move per-position values (router weights)
// between a rank's chunk and all T positions.
//
// --tp-comm-overlap (Megatron's flag; sequence parallelism only): the layers start some of these
// collectives early and finish them later, so that they run beside independent GEMMs on the group's
// stream (Transformer Engine's "bulk" overlaps; docs/decisions/tp-comm-overlap.md says which). The
// start_ forms return a PendingTp; finish waits for it. The values are the blocking calls' bit for bit.
//
// With one tensor-parallel rank every call returns its input: the single-device path is untouched.
// Each collective is one entry of the CUDA profiler (ops/collective.h: rows tp.all_gather,
// tp.reduce_scatter, tp.all_reduce, with the bytes each rank moves).
// Every call with tp > 1 is collective over the tensor-parallel group.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "comm/comm.h"
#include "ops/device_context.h"
#include "parallel/layout.h"

namespace quill {

// A collective started by a start_ call: its result, the input it reads (kept alive until the wait, so
// that the stream-ordered allocator cannot hand its memory to later compute) and the handle to wait on.
// Without a handle (one rank, or no sequence parallelism) `out` is already final.
struct PendingTp {
  Tensor in, out;
  std::unique_ptr<CommHandle> handle;
};

class PassBaton;  // base/pass_baton.h

struct TensorParallel {
  Comm* comm = nullptr;  // the tensor-parallel group; null with one rank
  int size = 1, rank = 0;
  bool sequence_parallel = false;
  // --tp-comm-overlap: the layers use the start_ forms where an independent GEMM can run beside them
  // (set by the stage from ModelOptions; only with sequence parallelism).
  bool comm_overlap = false;
  // --overlap-moe-expert-parallel-comm (the combined 1F1B, base/pass_baton.h): under sequence parallelism the
  // four blocking collectives below are started, the turn handed to the other pass, then finished, so that each
  // travels while the other micro-batch computes (the same collective: the same bits).
  PassBaton* interleave = nullptr;

  static TensorParallel of(const Layout& layout);
  bool active() const { return size > 1; }
  // Positions of a T-position row that this rank holds in the sequence region, and the first of them.
  int64_t region_rows(int64_t T) const { return sequence_parallel ? T / size : T; }
  int64_t chunk_rows(int64_t T) const { return T / size; }
  int64_t chunk_begin(int64_t T) const { return rank * chunk_rows(T); }

  Tensor gather_input(const DeviceContext& ctx, const Tensor& x_region) const;
  Tensor gather_input_backward(const DeviceContext& ctx, const Tensor& dx_full_partial) const;
  Tensor reduce_output(const DeviceContext& ctx, const Tensor& y_full_partial) const;
  Tensor reduce_output_backward(const DeviceContext& ctx, const Tensor& dy_region) const;
  // The same four, started (with sequence parallelism: a started all-gather or reduce-scatter; without it
  // the blocking call, already finished); finish waits and returns the result.
  PendingTp start_gather_input(const DeviceContext& ctx, const Tensor& x_region) const;
  PendingTp start_gather_input_backward(const DeviceContext& ctx, const Tensor& dx_full_partial) const;
  PendingTp start_reduce_output(const DeviceContext& ctx, const Tensor& y_full_partial) const;
  PendingTp start_reduce_output_backward(const DeviceContext& ctx, const Tensor& dy_region) const;
  static Tensor finish(PendingTp& pending);
  // gather_input with its consumer pipelined (--tp-comm-overlap, sequence parallelism): the chunks travel a
  // ring of started send_recv steps (Transformer Engine's ring-exchange all-gather), and on_chunk(full, begin,
  // end) runs as soon as rows [begin, end) of the result `full` are final, while the next chunk is in flight:
  // first the rank's own chunk. Without sequence parallelism: gather_input, then on_chunk over all rows.
  Tensor gather_input_pipelined(const DeviceContext& ctx, const Tensor& x_region,
                                const std::function<void(const Tensor&, int64_t, int64_t)>& on_chunk) const;
  // reduce_output with its producer pipelined (--tp-comm-overlap, sequence parallelism): the partial output
  // [T, C] is made in two pieces, piece j holding the j-th half of every rank's chunk of rows; produce(dst,
  // begin, end) writes rows [begin, end) of the partial output into dst ([end - begin, C], `dtype`). Piece 0's
  // reduce-scatter travels while piece 1 is made. Each row is summed by the same reduce-scatter over the same
  // ranks as in reduce_output, into the same place: the same bits. Without sequence parallelism: produce over
  // all rows, then reduce_output.
  Tensor reduce_output_pipelined(const DeviceContext& ctx, int64_t T, int64_t C, DType dtype,
                                 const std::function<void(const Tensor&, int64_t, int64_t)>& produce) const;

  Tensor chunk_of_region(const Tensor& x_region) const;
  Tensor chunk_of_region_backward(const DeviceContext& ctx, const Tensor& dx_chunk) const;
  Tensor region_of_chunk(const DeviceContext& ctx, const Tensor& y_chunk) const;
  Tensor region_of_chunk_backward(const Tensor& dy_region) const;

  // [T/tp, C] on every rank -> [T, C] (rank order); and partial [T, C] -> this rank's summed rows.
  Tensor gather_chunks(const DeviceContext& ctx, const Tensor& x_chunk) const;
  Tensor reduce_scatter_chunks(const DeviceContext& ctx, const Tensor& x_full_partial) const;
  // Sums `t` over the group in place (a no-op with one rank).
  void all_reduce(const DeviceContext& ctx, const Tensor& t) const;
};

}  // namespace quill
