// Per-op timing of the CUDA backend without touching any op: an OpTable whose every entry wraps the
// real CUDA table's entry with two CUDA events recorded on the context's stream, one before and one
// after, keyed by op name and a shape signature of the call's tensors.
//
//   OpProfiler profiler(backend.context());          // wraps ctx.cuda_ops
//   const DeviceContext ctx = profiler.context();     // train with this one
//   ... profiler.begin(); one step; OpProfile p = profiler.end();
//   std::puts(op_profile_table(p, {}).c_str());
//
// How state reaches the wrappers (function pointers capture nothing): the wrapping table is a
// `ProfilingOpTable`, an OpTable with two more members (the profiler and the real table) after the
// OpTable base. A wrapper is only ever installed in such a table, and an op reaches it only through
// `ctx.cuda_ops->*member`, so the wrapper finds its table by downcasting ctx.cuda_ops and the
// profiler from there. The wrappers are one template instantiated per OpTable member (the fixed
// registry below, indexed by OpId); no global or static mutable state is involved, and two
// profilers (two GPUs, two contexts) never share anything.
//
// Outside begin()/end() a wrapper forwards at once (one extra indirect call). Inside, an op called
// by another op through the same context (nested) is folded into its caller: only outermost calls
// are timed, so the rows add up to the time the ops held the stream; the gaps between them (IdleGapRow) are
// the time the stream waited for the host or another stream. Host-side work of an op
// (cudaMemcpy to the host, synchronising reductions) is inside its events as far as it delays the
// stream. Single host thread per context (as the trainer); plain C++ (no CUDA headers).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/comm_timeline.h"
#include "ops/comm_profile.h"
#include "ops/device_context.h"
#include "ops/op_table.h"

namespace quill {

// Every member of OpTable, in declaration order: the registry the profiler indexes by OpId.
// profiling.cc checks at compile time that it covers OpTable (sizeof), so a new op must be added here.
#define QUILL_OP_TABLE_ENTRIES(X)                                                                       \
  X(adamw_update) X(attention_forward) X(attention_backward) X(get_columns) X(set_columns) X(convert)  \
  X(zero) X(transfer) X(transfer_async) X(wait_transfers) X(transfer_fence) X(wait_transfer_fence)    \
  X(bind_host_thread) X(cross_entropy_forward_backward) X(copy) X(gather_rows) X(add_inplace)           \
  X(gather_rows_from_pair) X(regroup_index) X(scale_inplace)                                            \
  X(scale_by_scalar) X(scale_by_scalar_backward) X(scale_rows) X(scale_rows_backward) X(sum_squares)    \
  X(embedding_forward) X(embedding_backward) X(linear_forward) X(linear_backward_input)                 \
  X(linear_backward_weight) X(moe_route_plan) X(moe_permute) X(moe_permute_backward) X(moe_unpermute)   \
  X(moe_unpermute_backward) X(grouped_linear_forward) X(grouped_linear_backward_input)                  \
  X(grouped_linear_backward_weight) X(grouped_linear_backward_weight_pair) X(rmsnorm_forward) X(rmsnorm_backward) X(router_forward)            \
  X(router_forward_replay) X(router_backward) X(router_gate_forward) X(router_gate_backward_input)          \
  X(router_gate_backward_weight) X(short_conv_forward) X(short_conv_backward)              \
  X(swiglu_forward) X(swiglu_backward) X(embedding_forward_shard) X(embedding_backward_shard)          \
  X(cross_entropy_shard_stats) X(cross_entropy_shard_backward) X(collective) X(fp8_quantize)             \
  X(fp8_quantize_grouped) X(fp8_dequantize) X(fp8_linear_forward) X(fp8_linear_backward_input)          \
  X(fp8_linear_backward_weight) X(fp8_grouped_linear_forward) X(fp8_grouped_linear_backward_input)      \
  X(fp8_grouped_linear_backward_weight)

enum class OpId : int {
#define QUILL_OP_ENUM(name) name,
  QUILL_OP_TABLE_ENTRIES(QUILL_OP_ENUM)
#undef QUILL_OP_ENUM
      count
};
const char* op_name(OpId id);

// What one call costs at the least: FLOPs of the arithmetic (GEMMs 2*M*N*K; attention 4 * (query, key)
// pairs inside the causal window * heads * head_dim forward, 2.5x that backward), and bytes each tensor
// must cross device memory (read once, written once; accumulated outputs read and written).
// Fp8Matmul: an FP8 GEMM (ops/fp8.h), rated against the FP8 tensor ceiling.
enum class OpKind : int { Matmul, Attention, Memory, Fp8Matmul };
struct OpCost {
  double flops = 0;
  double bytes = 0;
  OpKind kind = OpKind::Memory;
  std::string note;  // appended to the signature (attention: the window)
  std::string op;    // the row's name when not the op's own (a collective's label)
};

struct OpProfileRow {
  std::string op;
  std::string signature;  // dtype[shape] of each tensor argument, in order, and the cost's note
  OpKind kind = OpKind::Memory;
  int64_t calls = 0;
  double total_ms = 0;
  double flops = 0;  // over all calls
  double bytes = 0;
};

// The stream ran no op between two outermost calls: it waited for the host to issue the next (a
// synchronisation inside the op before, the host's own work) or for another stream (a collective's event).
// Aggregated by the pair of ops around the gap; "(step start)" before the step's first op.
struct IdleGapRow {
  std::string after;   // the op that ended before the gap
  std::string before;  // the op that started after it
  int64_t gaps = 0;
  double total_ms = 0;
};

struct OpProfile {
  int64_t step = -1;
  double step_ms = 0;        // GPU time from begin() to end() on the stream (events)
  double host_ms = 0;        // host wall time from begin() to end()
  double ops_ms = 0;         // sum over rows
  double idle_ms = 0;        // sum of the gaps between outermost calls (idle_rows), up to the last call's end
  int64_t calls = 0;         // outermost calls timed
  int64_t nested_calls = 0;  // calls folded into their caller
  std::vector<OpProfileRow> rows;  // by total time, longest first
  std::vector<IdleGapRow> idle_rows;  // by total gap, longest first
  // The NCCL collectives on their own streams (ops/comm_profile.h); empty without such communicators.
  std::vector<CommProfileRow> comm_rows;
};

// Measured ceilings for the achieved/ceiling columns (defaults: performance.md's H200 figures,
// cuBLAS bf16 GEMM n = 8192 and a device-to-device copy counting read + write).
// fp8_matmul_tflops: until measured on the machine, twice the bf16 figure (Hopper's dense FP8 tensor
// rate is twice its bf16 rate: H100/H200 SXM 1,979 against 989 TFLOP/s).
struct Ceilings {
  double matmul_tflops = 794;
  double copy_gbps = 4240;
  double fp8_matmul_tflops = 2 * 794;
};

struct ProfilingOpTable;

class OpProfiler {
 public:
  // Wraps ctx.cuda_ops (a CUDA context). The profiler must outlive every use of context().
  explicit OpProfiler(const DeviceContext& ctx);
  ~OpProfiler();
  OpProfiler(const OpProfiler&) = delete;
  OpProfiler& operator=(const OpProfiler&) = delete;

  // `ctx` with cuda_ops replaced by the wrapping table.
  DeviceContext context() const;
  // Start timing (records a start event on the stream); `step` labels the profile.
  void begin(int64_t step);
  // Stop, synchronise the stream, aggregate by (op, signature).
  OpProfile end();
  bool recording() const { return recording_; }

  // Used by the wrappers (profiling.cc).
  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  DeviceContext inner_;
  std::unique_ptr<ProfilingOpTable> table_;
  std::unique_ptr<Impl> impl_;
  std::shared_ptr<CommTimeline> timeline_;  // the context's; this profiler listens to it
  bool recording_ = false;
};

// An OpTable that times every call (see the top of this file).
struct ProfilingOpTable : OpTable {
  OpProfiler* profiler = nullptr;
  const OpTable* inner = nullptr;
};

// Fixed-width table: op, signature, calls, total ms, mean us, % of step, TFLOP/s or GB/s achieved and
// as % of `ceilings`; then a per-op roll-up and the coverage line. `top` rows at most (0: all).
std::string op_profile_table(const OpProfile& profile, const Ceilings& ceilings, size_t top = 0);
// The same as JSON (every row, the roll-up, the ceilings).
std::string op_profile_json(const OpProfile& profile, const Ceilings& ceilings);

}  // namespace quill
