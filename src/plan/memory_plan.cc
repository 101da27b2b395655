#include "plan/memory_plan.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "base/error.h"
#include "model/offload_split.h"
#include "parallel/grid.h"
#include "parallel/layout.h"
#include "parallel/pipeline_schedule.h"
#include "plan/activation_trace.h"
#include "plan/param_memory.h"

namespace quill::plan {

int64_t StagePlan::dynamic_peak() const {
  int64_t n = 0;
  for (int64_t b : at_peak) n += b;
  return n;
}

const StagePlan& MemoryPlan::largest() const {
  QUILL_CHECK(!stages.empty(), "memory plan: no stages");
  return *std::max_element(stages.begin(), stages.end(),
                           [](const StagePlan& a, const StagePlan& b) { return a.device_total() < b.device_total(); });
}

namespace {

int64_t scaled(double fraction, int64_t bytes) { return std::llround(fraction * static_cast<double>(bytes)); }

// One step of stage `s`: its micro-batches through the stage's row of the 1F1B table, as
// train/pipeline_executor.cc runs it (one stage: forward and backward of each row in turn, as
// InklingModel::train_row). Received messages are allocated at the receive; a sent one is freed
// after the send; a fused send and receive holds both. `combined`: the combined 1F1B of one stage (F0, then
// F(m+1) with B(m)), traced as the forward before the backward: the two passes' saved activations at once;
// the temporaries of the pass that yielded mid-layer (its exchange buffers) are not traced beside the other's.
void replay_step(StageTrace& st, MemoryTrace& mem, int pp, int s, int M, bool combined, int wgrad_per_gemm) {
  std::vector<StageTrace::Activations> acts(static_cast<size_t>(M));
  // Every stage runs its M backwards in micro-batch order: the m-th's turn for the routed weight gradients, set
  // before its backward (as the executor sets it).
  auto backward = [&](size_t m, MemoryTrace::Id dh) {
    acts[m].expert_wgrad = expert_wgrad_turn(static_cast<int64_t>(m), M, wgrad_per_gemm);
    return st.backward(acts[m], dh);
  };
  if (pp == 1 && combined) {
    st.forward(acts[0], MemoryTrace::kNone);
    for (size_t m = 0; m < acts.size(); ++m) {
      if (m + 1 < acts.size()) st.forward(acts[m + 1], MemoryTrace::kNone);
      backward(m, MemoryTrace::kNone);
      st.release(acts[m]);
    }
    return;
  }
  if (pp == 1) {
    for (size_t m = 0; m < acts.size(); ++m) {
      st.forward(acts[m], MemoryTrace::kNone);
      backward(m, MemoryTrace::kNone);
      st.release(acts[m]);
    }
    return;
  }
  const PipeSchedule schedule = one_f_one_b(pp, M);
  std::vector<MemoryTrace::Id> out(static_cast<size_t>(M), MemoryTrace::kNone), in = out, dout = out, din = out;
  const int64_t message = st.residual_rows() * st.row_bytes();
  auto tensor_of = [&](const PipeMessage& msg) -> MemoryTrace::Id& {
    const size_t m = static_cast<size_t>(msg.micro);
    if (msg.send) return msg.kind == PipePass::Forward ? out[m] : din[m];
    MemoryTrace::Id& t = msg.kind == PipePass::Forward ? in[m] : dout[m];
    t = mem.alloc(Use::Pipeline, message);
    return t;
  };
  for (const PipeAction& a : schedule.actions[static_cast<size_t>(s)]) {
    if (!a.is_pass) {
      const std::vector<PipeMessage>& msgs = a.exchange.messages;
      const PipeMessage& snd = msgs.size() == 2 ? (msgs[0].send ? msgs[0] : msgs[1]) : msgs[0];
      if (msgs.size() == 2) tensor_of(msgs[0].send ? msgs[1] : msgs[0]);  // the receive, while the send is held
      if (snd.send) {
        MemoryTrace::Id& t = tensor_of(snd);
        mem.free(t);
        t = MemoryTrace::kNone;
      } else {
        tensor_of(snd);
      }
      continue;
    }
    const size_t m = static_cast<size_t>(a.step.micro);
    if (a.step.pass == PipePass::Forward) {
      out[m] = st.forward(acts[m], in[m]);
      in[m] = MemoryTrace::kNone;  // now the micro-batch's (act.h_in)
    } else {
      din[m] = backward(m, dout[m]);
      if (din[m] != MemoryTrace::kNone) mem.retag(din[m], Use::Pipeline);
      st.release(acts[m]);
      mem.free(dout[m]);
      dout[m] = MemoryTrace::kNone;
    }
  }
}

int64_t one_micro_batch(const InklingConfig& c, const TraceShape& shape, int64_t first, int64_t end) {
  MemoryTrace mem;
  StageTrace st(c, shape, first, end, mem);
  StageTrace::Activations act;
  const MemoryTrace::Id in = st.first_stage() ? MemoryTrace::kNone
                                              : mem.alloc(Use::Pipeline, st.residual_rows() * st.row_bytes());
  const MemoryTrace::Id out = st.forward(act, in);
  const int64_t kept = mem.live_by_use()[static_cast<size_t>(Use::Saved)];
  mem.free(out);
  st.backward(act, MemoryTrace::kNone);
  st.release(act);
  return kept;
}

int nccl_communicators(const Grid& grid, int rank) {
  // Layout::create: the world, then one communicator per group kind with more than one rank.
  int n = grid.world() > 1 ? 1 : 0;
  for (GroupKind k : {GroupKind::TP, GroupKind::CP, GroupKind::DP, GroupKind::DP_CP, GroupKind::PP, GroupKind::EP,
                      GroupKind::ETP, GroupKind::EDP})
    n += grid.group(k, rank).size() > 1 ? 1 : 0;
  return n;
}

}  // namespace

void check_tp_comm_overlap(const LayoutSpec& layout, bool tp_comm_overlap) {
  QUILL_CHECK(!tp_comm_overlap || (layout.tp > 1 && layout.sequence_parallel),
              "--tp-comm-overlap needs --tensor-model-parallel-size above 1 with --sequence-parallel (the gathers and "
              "reductions it overlaps are sequence parallelism's; Megatron asks the same)");
}

void check_overlap_moe_ep_comm(const LayoutSpec& layout, bool overlap_moe_ep_comm) {
  QUILL_CHECK(!overlap_moe_ep_comm || layout.pp == 1,
              "--overlap-moe-expert-parallel-comm needs --pipeline-model-parallel-size 1 (got {}): with a pipeline the "
              "combined 1F1B step needs interleaved virtual stages (Megatron asks for "
              "--num-layers-per-virtual-pipeline-stage), which quill does not have", layout.pp);
}

MemoryPlan plan_memory(const PlanRequest& req) {
  check_tp_comm_overlap(req.layout, req.tp_comm_overlap);
  check_overlap_moe_ep_comm(req.layout, req.overlap_moe_ep_comm);
  MemoryPlan plan;
  plan.request = req;
  LayoutSpec spec = req.layout;
  plan.notes = check_layout_flags(spec);
  plan.request.layout = spec;
  const InklingConfig& c = req.config;
  validate_config(c);
  QUILL_CHECK(spec.cp == 1, "--context-parallel-size {}: the memory plan does not model context parallelism",
              spec.cp);
  QUILL_CHECK(req.row_tokens >= 2, "the row length is {} tokens: a row needs at least 2 (--row-tokens or --rows)",
              req.row_tokens);
  QUILL_CHECK(req.global_batch >= 1 && req.global_batch % spec.dp == 0,
              "--global-batch {} does not divide over {} data-parallel ranks", req.global_batch, spec.dp);
  QUILL_CHECK(req.gpus_per_node >= 1, "--gpus-per-node {}: must be at least 1", req.gpus_per_node);
  QUILL_CHECK(req.expert_rows_factor >= 1, "--expert-rows-factor {}: must be at least 1", req.expert_rows_factor);
  check_optimizer_memory(req.optimizer);
  const Grid grid(spec.world(), spec);
  const std::vector<int64_t> stage_layers = resolve_stage_layers(spec, c.num_layers);
  if (spec.ep > 1 || spec.etp > 1)
    plan.notes.push_back("expert parallelism is modelled by Megatron's scheme (docs/plan.md: the dispatcher's buffers at "
                         "the routing's worst case)");
  const int M = static_cast<int>(req.global_batch / spec.dp);
  const double F = req.optimizer.effective_fraction();
  const int64_t m_bytes = static_cast<int64_t>(dtype_size(req.optimizer.exp_avg));
  const int64_t v_bytes = static_cast<int64_t>(dtype_size(req.optimizer.exp_avg_sq));
  // The combined 1F1B runs where the trainer runs it: the flag, expert parallelism, one stage.
  const bool combined = req.overlap_moe_ep_comm && spec.ep > 1 && spec.pp == 1;
  int64_t first = 0;
  for (int s = 0; s < spec.pp; ++s) {
    StagePlan sp;
    sp.stage = s;
    sp.role = spec.pp == 1 ? "whole model" : s == 0 ? "first" : s == spec.pp - 1 ? "last" : "middle";
    sp.first_layer = first;
    sp.end_layer = first + stage_layers[static_cast<size_t>(s)];
    first = sp.end_layer;
    for (int64_t l = sp.first_layer; l < sp.end_layer; ++l) (c.is_moe(l) ? sp.moe_layers : sp.dense_layers) += 1;
    for (int r = 0; r < grid.world(); ++r)
      if (grid.coords(r).pp == s) {
        sp.world_rank = r;
        break;
      }
    const RankParams rp =
        rank_params(c, grid, sp.world_rank, stage_layers, req.device, req.freeze, req.fp8, req.ddp_bucket_size);
    sp.parameters = rp.elements;
    sp.host_weights_at_load = rp.elements * 4;
    sp.compute_weights = rp.compute_bytes();
    sp.transient_compute = rp.transient_compute_bytes();
    sp.gradients = rp.grad_bytes(req.optimizer.main_grads);
    // The offloaded head of each bucket's shard (model/offload_split.h), as placement and AdamW keep it:
    // on the host its fp32 master, both moments, an fp32 gradient copy and (a bf16 bucket) a staging copy
    // of the updated weights; on the device the rest of the masters (bf16 buckets) and moments.
    std::vector<int64_t> shards;
    for (const BucketBytes& b : rp.buckets) shards.push_back(b.shard());
    const std::vector<int64_t> offloaded = offload_split(shards, F);
    for (size_t i = 0; i < rp.buckets.size(); ++i) {
      const BucketBytes& b = rp.buckets[i];
      const int64_t h = offloaded[i], kept = b.shard() - h;
      const bool separate_master = b.compute != DType::F32;
      if (separate_master) sp.master_weights += kept * 4;
      sp.moments += kept * (m_bytes + v_bytes);
      sp.host_optimizer +=
          h * (4 + 4 + m_bytes + v_bytes + (separate_master ? static_cast<int64_t>(dtype_size(b.compute)) : 0));
      sp.host_masters += h * 4;
    }
    sp.host_export = kExportHostBufferBytes;

    TraceShape shape;
    shape.device = req.device;
    shape.row_tokens = req.row_tokens;
    shape.tp = spec.tp;
    shape.ep = spec.ep;
    shape.etp = spec.etp;
    shape.sequence_parallel = spec.sequence_parallel;
    shape.freeze = req.freeze;
    shape.expert_rows_factor = req.expert_rows_factor;
    shape.recompute = req.recompute;
    shape.tp_comm_overlap = req.tp_comm_overlap;
    shape.expert_wgrad_micro_batches = req.expert_wgrad_micro_batches;
    shape.wgrad_beside_return_exchange = spec.ep > 1 && (req.delay_wgrad_compute || combined);
    shape.fp8 = req.fp8;
    MemoryTrace mem;
    {
      StageTrace st(c, shape, sp.first_layer, sp.end_layer, mem);
      replay_step(st, mem, spec.pp, s, M, combined, req.expert_wgrad_micro_batches);
    }
    mem.expect_empty(fmt::format("stage {}", s));
    sp.at_peak = mem.at_peak();
    sp.micro_batches = M;
    sp.in_flight = combined ? std::min(2, M) : std::min(spec.pp - s, M);
    sp.activations_per_micro_batch = one_micro_batch(c, shape, sp.first_layer, sp.end_layer);

    if (req.device == Device::CUDA) {
      sp.gemm_workspace = kCublasWorkspaceBytes;
      sp.cuda_context = kCudaContextBytes;
      sp.allocator_slack = scaled(kAllocatorSlack, sp.dynamic_peak());
      sp.comm_buffers = nccl_communicators(grid, sp.world_rank) * kNcclBytesPerCommunicator;
    } else {
      sp.gemm_workspace = rp.largest_matrix * 4;  // ops/cpu/linear.cc: the weight transposed per call
    }
    plan.stages.push_back(sp);
  }
  const int nodes = (grid.world() + req.gpus_per_node - 1) / req.gpus_per_node;
  plan.pinned_host_per_node.assign(static_cast<size_t>(nodes), 0);
  plan.startup_host_per_node.assign(static_cast<size_t>(nodes), 0);
  plan.export_host_per_node.assign(static_cast<size_t>(nodes), 0);
  for (int r = 0; r < grid.world(); ++r) {
    const StagePlan& sp = plan.stages[static_cast<size_t>(grid.coords(r).pp)];
    const size_t node = static_cast<size_t>(r / req.gpus_per_node);
    plan.pinned_host_per_node[node] += sp.host_optimizer;
    plan.startup_host_per_node[node] += sp.host_startup_peak();
    plan.export_host_per_node[node] += sp.host_export_peak();
    plan.stage_of_rank.push_back(grid.coords(r).pp);
  }
  return plan;
}

}  // namespace quill::plan
