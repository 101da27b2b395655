// The exchange phases of Megatron's all-to-all token dispatcher, dropless. Expert parallelism of
// size ep gives rank q of the expert-parallel group the routed experts [q*El, (q+1)*El), El = E / ep.
// Before: each rank routed its tokens and permuted its (token, slot) assignments into expert order
// (ops::moe_route_plan, ops::moe_permute): rows for experts of rank q form one block.
//   plan_dispatch     exchanges the per-expert row counts (an all-to-all of El counts per peer)
//   dispatch_tokens   all-to-all-v of the rows, then regrouped from (source rank, local expert) order
//                     to (local expert, source rank) order for the grouped GEMM over local experts
//                     (one ops::gather_rows by the plan's row index)
//   combine_tokens    the exact reverse (and dispatch_tokens' adjoint: the backward of each is the other)
// Collective over `ep` (null or one rank: no exchange, the rows stay as they are). The exchanges are
// rows of the per-op profile on a GPU (ops::collective): "ep.counts", "ep.dispatch" and "ep.combine"
// with the bytes each rank sends; the regrouping shows as gather_rows rows.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "comm/comm.h"
#include "ops/device_context.h"
#include "parallel/layout.h"

namespace quill {

// The expert-parallel group a MoE layer exchanges its routed rows over (GroupKind::EP of the
// layout). With one rank the comm is null and the exchange is skipped.
class PassBaton;  // base/pass_baton.h

struct ExpertParallel {
  Comm* comm = nullptr;
  int size = 1, rank = 0;
  // Megatron's --moe-shared-expert-overlap: the shared experts compute while the routed rows are in
  // flight (the token exchange started, then waited for); the same results bit for bit.
  bool overlap_shared_experts = false;
  // --delay-wgrad-compute: in the backward the routed experts' weight gradients run after the input
  // gradients' return exchange has started, beside it; the same results bit for bit.
  bool delay_wgrad = false;
  // --overlap-moe-expert-parallel-comm: the combined step's turn-taking (base/pass_baton.h). The MoE block
  // yields the turn to the other pass right after starting each token exchange, so that the exchange
  // travels while the other micro-batch computes; outside a combined step a yield does nothing.
  PassBaton* interleave = nullptr;
  void yield_turn() const;
  static ExpertParallel of(const Layout& layout);
  bool active() const { return size > 1; }
};

struct DispatchPlan {
  int ep = 1, rank = 0;
  int64_t experts = 0, local_experts = 0;
  std::vector<int64_t> send_rows;                // per destination rank
  std::vector<int64_t> recv_rows;                // per source rank
  std::vector<std::vector<int64_t>> recv_counts;  // [source rank][local expert] rows received
  std::vector<int64_t> local_counts;             // per local expert, over every source: the GEMM groups
  // The regrouping's row indexes (ops::gather_rows), I32 [R] on the context's device, made once per
  // plan and used by the forward's exchanges and the backward's: to_expert_order[j] is the received
  // (source-major) row that becomes row j in (local expert, source) order; to_source_order is its
  // inverse. Undefined when ep == 1 or nothing is received.
  Tensor to_expert_order, to_source_order;
  int64_t received_rows() const;
};

// counts_E: this rank's rows per expert (all E experts, in expert order). Throws naming the sizes
// when ep does not divide E.
DispatchPlan plan_dispatch(const DeviceContext& ctx, const std::vector<int64_t>& counts_E, Comm* ep);
// plan_dispatch from the route plan's deferred form (ops::moe_route_plan with its counts I64 [E + 1] in the
// context's memory: the counts, then the check word), the first E + 1 entries of plan_2E1 (I64 [2E + 1]), whose last
// E receive the peers' counts. On a GPU the counts' exchange runs on the device and one copy brings the rank's
// counts, its check word and the received counts to the host: the forward's one synchronisation per MoE layer
// (there were two, and a host-built regroup index in between). counts_E (host I64 [E]) gets the rank's own counts;
// *check_word goes to ops::moe_route_plan_check before anything else uses the plan (with a bad assignment the
// counts are zero: the peers get a well-formed exchange while this rank names the error).
DispatchPlan plan_dispatch_deferred(const DeviceContext& ctx, const Tensor& plan_2E1, Comm* ep, const Tensor& counts_E,
                                    int64_t* check_word);
// xp_PD [P, D]: this rank's rows in expert order (P = its total). Returns [R, D], R = received_rows().
Tensor dispatch_tokens(const DeviceContext& ctx, const DispatchPlan& plan, const Tensor& xp_PD, Comm* ep);
// dispatch_tokens in two halves, for compute in between: the all-to-all-v started, then waited for and
// regrouped. The pending exchange holds its buffers until finished.
struct PendingDispatch {
  Tensor sent, got;
  std::unique_ptr<CommHandle> handle;
};
PendingDispatch start_dispatch_tokens(const DeviceContext& ctx, const DispatchPlan& plan, const Tensor& xp_PD, Comm* ep);
Tensor finish_dispatch_tokens(const DeviceContext& ctx, const DispatchPlan& plan, PendingDispatch& pending);
// y_RD [R, D] in dispatch_tokens' order -> [P, D] back in this rank's expert order.
Tensor combine_tokens(const DeviceContext& ctx, const DispatchPlan& plan, const Tensor& y_RD, Comm* ep);
// combine_tokens in two halves: regrouped and the all-to-all-v started, then waited for.
PendingDispatch start_combine_tokens(const DeviceContext& ctx, const DispatchPlan& plan, const Tensor& y_RD, Comm* ep);
Tensor finish_combine_tokens(const DeviceContext& ctx, const DispatchPlan& plan, PendingDispatch& pending);

}  // namespace quill
