// Rows gathered by an index, in one op: the regrouping of the expert-parallel exchange
// (parallel/expert_dispatch.cc) from (source rank, local expert) order to (local expert, source
// rank) order and back. It replaced one copy per (source, expert) block: 256 copies of ~48 rows
// per exchange on a seed rank, 618 ms of a profiled step (issue 40's profile).
//
// gather_rows: dst_ND[i] = src_RD[index_N[i]] for i in [0, N). Rows of any dtype, copied bit for
// bit. index_N is I32 on the context's device (host memory on the CPU). dst must not overlap src.
// Every index in [0, R): the CPU reference checks and names the first bad entry; the CUDA kernel
// does not (a check would cost a synchronisation per call), and its one caller builds the index
// from a dispatch plan on the host, where the range is checked.
//
// gather_rows_from_pair: the same over two sources seen as one, a's R rows then b's:
// dst_ND[i] = index[i] < R ? a_RD[index[i]] : b_SD[index[i] - R]. a and b have the same width and dtype;
// either may have no rows. It merges two micro-batches' expert-ordered rows into one expert order in one
// pass (model/expert_wgrad_pairs.h), without first copying the two sources side by side.
#pragma once

#include "ops/device_context.h"

namespace quill::ops {

void gather_rows(const DeviceContext& ctx, const Tensor& src_RD, const Tensor& index_N, const Tensor& dst_ND);
// The regrouping's two indexes from the rows received per (source rank s, local expert e), counts_SL I64 [S, L]
// (the count exchange's output: on a GPU in device memory, so that no host loop and no transfer sit between the
// counts' arrival and the token exchange; measured at ~50 us of idle GPU per MoE layer and micro-batch on a seed
// rank, issue 40). Block (s, e) of n rows starts at row `by_source` in the received (source, expert) order and at
// `by_expert` in (expert, source) order; index_2R I32 [2R], R the counts' sum:
//   index[by_expert + r] = by_source + r           (to expert order: the rows gather_rows takes, first R)
//   index[R + by_source + r] = by_expert + r       (to source order, its inverse: the second R)
// The CPU checks the counts (non-negative, summing to R) and names the first bad one; the GPU does not (its one
// caller has the same counts on the host and checked them there).
void regroup_index(const DeviceContext& ctx, const Tensor& counts_SL, const Tensor& index_2R);
// The index that merges two expert-ordered sources (counts_a_E, counts_b_E: host I64 rows per expert) into one
// expert order, expert e's rows of a then of b, as gather_rows_from_pair reads it: host I32 [Pa + Pb].
Tensor expert_merge_index(const Tensor& counts_a_E, const Tensor& counts_b_E);
// Two sources' expert-ordered rows (a GEMM's dy and x of each) merged into one expert order by expert_merge_index:
// dy [Pa + Pb, M] and x [Pa + Pb, K] on ctx's device (the index moved there on a GPU), and the summed counts (host
// I64 [E]). The merged rows' weight-gradient GEMM is the pair's (ops::grouped_linear_backward_weight_pair).
struct MergedExpertRows {
  Tensor dy, x, counts;
};
MergedExpertRows merge_expert_rows(const DeviceContext& ctx, const Tensor& dy_a, const Tensor& x_a,
                                   const Tensor& counts_a_E, const Tensor& dy_b, const Tensor& x_b,
                                   const Tensor& counts_b_E);
void gather_rows_from_pair(const DeviceContext& ctx, const Tensor& a_RD, const Tensor& b_SD, const Tensor& index_N,
                           const Tensor& dst_ND);

}  // namespace quill::ops
