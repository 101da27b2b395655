// When each bucket's data-parallel collectives are issued (optim/ddp_config.h's flags;
// docs/decisions/overlap-grad-param.md). The collectives themselves and the bytes they carry are the
// same with the overlaps on or off; only their place in the step moves:
//
//   gradients   off: every bucket's reduction after the passes, started in bucket order, then waited
//               on in bucket order, by the optimizer before the norm.
//               --overlap-grad-reduce: a bucket's reduction starts at the first grads_written_from(l)
//               of the stage's last backward with l <= its first layer (its gradients are final then),
//               in the backward; at passes_done() the rest start and all are waited on, in bucket
//               order (Megatron's finish_grad_sync at the end of its forward-backward).
//   parameters  off: every bucket's all-gather right after the update, in bucket order.
//               --overlap-param-gather: owed after the update; at weights_needed(l) in the next forward
//               each owed bucket with its first layer <= l is started (if it was not) and waited on,
//               and the next bucket in forward order (first layer ascending) is started behind it, as
//               Megatron's forward pre-hook dispatches the next bucket's all-gather.
//
// On a GPU a start is enqueued on the communication stream after the compute stream's earlier work
// and a wait makes the compute stream wait (comm/comm.h's start_* forms), so the collective runs
// under the compute issued between the two. On the CPU (MPI) a start posts the nonblocking operation
// and the wait completes it under the communicator's deadline, so the CPU ranks run the same
// start/wait pairs at the same points of the step.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "comm/comm.h"
#include "model/params.h"
#include "model/pass_hooks.h"
#include "ops/device_context.h"
#include "optim/ddp_config.h"

namespace quill {

class BucketOverlap final : public PassHooks {
 public:
  // `table` must be placed (its buckets made).
  BucketOverlap(ParamTable& table, const DeviceContext& ctx, const DdpConfig& config);

  void weights_needed(int64_t layer) override;
  void grads_written_from(int64_t layer) override;

  // After the step's passes (every gradient settled): with --overlap-grad-reduce, completes every
  // bucket's reduction now (finish_grad_reduce), so that the step's reductions end with its passes
  // and a peer lost during one is named there; without it nothing (the optimizer reduces).
  void passes_done();
  // Before the norm reads the shards: starts the reductions not started yet, then waits for every
  // bucket's, in bucket order. Once per step: a second call before gather_params does nothing.
  void finish_grad_reduce();
  // After the update wrote this rank's shards of the compute copies (the step's gradients are spent:
  // the next step's reductions are open): all-gathers them now, or with --overlap-param-gather leaves
  // them owed to the next forward.
  void gather_params();
  // Completes every all-gather still owed, in forward order: before anything but a forward through
  // weights_needed reads the compute copies (the Hugging Face export, the end of the run).
  void finish_param_gather();

 private:
  enum class Gather { kDone, kOwed, kStarted };
  void start_reduce(size_t bucket);
  void start_gather(size_t bucket);
  void wait_gather(size_t bucket);

  ParamTable& table_;
  DeviceContext ctx_;
  DdpConfig config_;
  std::vector<std::unique_ptr<CommHandle>> reduce_;  // this step's started reductions (null: none to wait for)
  std::vector<bool> reduce_started_;
  bool grads_reduced_ = false;  // finish_grad_reduce ran since the last gather_params
  std::vector<Gather> gather_;
  std::vector<std::unique_ptr<CommHandle>> gather_handle_;
  std::vector<size_t> forward_order_;  // bucket indices by first layer, ascending (ties: bucket order)
  bool gathers_owed_ = false;
};

}  // namespace quill
