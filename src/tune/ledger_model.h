// The collective ledger of one rank, modelled from the layout and the workload alone (docs/tune.md):
// the rows `quill train --simulate-rank R` writes to OUT/collectives.json for one training step
// (comm/collective_ledger.h: per phase, group and operation the calls, payload and wire bytes),
// derived from the code that makes the calls:
//
//   - tensor and sequence parallelism (parallel/tensor_parallel.cc) around the attention block, the
//     dense MLP and the shared experts (model/attention_block.cc, dense_mlp.cc, moe_block.cc); the
//     routed experts' chunk <-> region moves without SP; the shared experts' router weights;
//   - the sequence-parallel halos of the residual short convolutions (parallel/sp_halo.cc);
//   - the vocab-parallel embedding and loss (model/stage_model.cc: the row statistics in chunks of
//     1,024 rows on the CPU, one chunk of 8,192 on a GPU);
//   - the expert dispatcher (parallel/expert_dispatch.cc): the count exchange, the dispatch and the
//     combine all-to-alls forward and their adjoints backward;
//   - the pipeline's messages by quill's 1F1B table (parallel/pipeline_schedule.h,
//     train/pipeline_executor.cc);
//   - the optimizer phase (train/trainer.cc, optim/grad_sync.cc, optim/grad_norm.cc, optim/adamw.cc):
//     the expert counts and loss summed over the world, each bucket's tensor-parallel all-reduce and
//     reduce-scatter, the norm, each bucket's weight all-gather (buckets: plan/param_memory.h).
//
// Exact, byte for byte, but for the expert exchange's routing: the rows a rank's router sends to its
// own experts (no traffic) depend on its inputs. Given as `own_expert_rows` they make the rows exact
// (the CTest passes a simulated run's recorded counts); otherwise the routing is balanced, as
// `--simulate-routing balanced` models the peers (comm/loopback_routing.cc), for this rank too.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "comm/collective_ledger.h"
#include "model/config.h"
#include "model/recompute.h"
#include "parallel/layout_spec.h"
#include "tensor/dtype.h"

namespace quill::tune {

struct LedgerWorkload {
  int64_t row_tokens = 0;     // one row per micro-batch
  int64_t global_batch = 1;   // rows per step, over the data-parallel ranks
  Device device = Device::CUDA;  // activations bf16 on a GPU, fp32 on the CPU (and the loss statistics' dtype)
  std::vector<std::string> freeze;  // frozen parameter patterns (ParamTable::freeze)
  // Recomputed layers run their forward's collectives again before their backward (model/recompute.h).
  RecomputeOptions recompute;
};

// One training step's rows of `world_rank`, sorted as the ledger sorts them (phase, group, op), each
// with step `step`. `own_expert_rows`: over the step, the rows this rank's routers sent to its own
// experts, summed over its stage's MoE layers and its micro-batches; negative: balanced (each MoE
// layer's P = T/tp x top_k rows spread as comm/loopback_routing.cc spreads a peer's). Throws naming
// the flag for a layout quill refuses.
std::vector<CollectiveRow> modelled_ledger(const InklingConfig& config, const LayoutSpec& spec, int world_rank,
                                           const LedgerWorkload& workload, int64_t step = 0,
                                           int64_t own_expert_rows = -1);

// The balanced figure of own_expert_rows above, for comparison.
int64_t balanced_own_expert_rows(const InklingConfig& config, const LayoutSpec& spec, int world_rank,
                                 const LedgerWorkload& workload);

// The rank's groups by the names the ledger uses ("world", "tp", "dp-cp", "pp", "ep", "edp", ...), each
// with its world ranks in group order, as collectives.json lists them (plus "world").
std::map<std::string, std::vector<int>> rank_groups(const LayoutSpec& spec, int world_rank);

// The world rank that stands for pipeline stage `stage` (tp, dp and the expert coordinates 0).
int stage_rank(const LayoutSpec& spec, int stage);

}  // namespace quill::tune
