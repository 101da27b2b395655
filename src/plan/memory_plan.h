// `quill plan`: the bytes per GPU of a training layout, by pipeline stage and category, before
// anything is loaded (docs/plan.md has every formula and what is modelled versus measured).
//   resident   compute weights, fp32 master weights, gradient buffers and Adam moments of the rank's
//              parameter shares (plan/param_memory.h), the optimizer state split device / host by the
//              offload fraction;
//   dynamic    the activation plan (plan/activation_trace.h) replayed through the stage's 1F1B
//              schedule (parallel/pipeline_schedule.h): the most bytes live at once, by use;
//   outside    what the device allocator does not count: GEMM workspace, CUDA context, allocator
//   the        slack, NCCL buffers (modelled constants).
//   allocator
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/recompute.h"
#include "optim/optimizer_memory.h"
#include "parallel/layout_spec.h"
#include "plan/memory_trace.h"

namespace quill::plan {

struct PlanRequest {
  InklingConfig config;
  LayoutSpec layout;
  int64_t row_tokens = 0;    // one row per micro-batch
  int64_t global_batch = 1;  // rows per optimizer step
  Device device = Device::CUDA;
  OptimizerMemory optimizer;
  std::vector<std::string> freeze;  // frozen parameter patterns (ParamTable::freeze)
  int gpus_per_node = 8;            // for the pinned host memory per node
  double expert_rows_factor = 1.0;  // saved routed-expert rows against balanced routing (EP > 1)
  RecomputeOptions recompute;       // --recompute-granularity full ... (model/recompute.h)
  bool fp8 = false;                 // --fp8-recipe blockwise: the FP8 matrices' quantised copies (param_memory.h)
  bool tp_comm_overlap = false;     // --tp-comm-overlap: its started collectives' buffers (activation_trace.h)
  // --overlap-moe-expert-parallel-comm (expert parallelism, one stage): the combined 1F1B keeps two
  // micro-batches' activations (pipeline_schedule.h: combined_one_f_one_b).
  bool overlap_moe_ep_comm = false;
  // --delay-wgrad-compute: with expert parallelism the late weight gradients (and a pair's merged rows) run
  // beside the backward's return exchange.
  bool delay_wgrad_compute = false;
  // --moe-expert-wgrad-micro-batches (model/expert_wgrad_pairs.h): 2 holds a micro-batch's routed rows per MoE
  // layer until the next backward.
  int expert_wgrad_micro_batches = 1;
  // --ddp-bucket-size (elements; -1: the default): the buckets' padding and each one's offloaded head. The
  // overlap flags allocate nothing (docs/decisions/overlap-grad-param.md).
  int64_t ddp_bucket_size = -1;
};

// --tp-comm-overlap only with tensor parallelism above 1 and sequence parallelism (the collectives it moves are
// sequence parallelism's; Megatron asks the same): a quill::Error naming both flags otherwise.
void check_tp_comm_overlap(const LayoutSpec& layout, bool tp_comm_overlap);
// --overlap-moe-expert-parallel-comm only without pipeline parallelism (the combined 1F1B of a pipeline needs
// interleaved virtual stages, which quill does not have; Megatron asks for them too): a quill::Error naming
// the flags otherwise.
void check_overlap_moe_ep_comm(const LayoutSpec& layout, bool overlap_moe_ep_comm);

// Modelled constants of what the device allocator does not count (docs/plan.md says where each
// comes from).
inline constexpr int64_t kCublasWorkspaceBytes = int64_t{32} << 20;  // ops/cuda/cuda_resources.h
inline constexpr int64_t kCudaContextBytes = int64_t{512} << 20;
inline constexpr double kAllocatorSlack = 0.01;                      // of the dynamic peak
inline constexpr int64_t kNcclBytesPerCommunicator = int64_t{128} << 20;
// The H200's cudaMemGetInfo total (bench/results/2026-11-30-slice-v6: device_total_bytes), the
// device memory `quill plan` checks against when none is given.
inline constexpr int64_t kH200MemoryBytes = 150109880320;
// The host memory the streamed Hugging Face export (--save-hf, quill export) adds on each rank: its
// staging and fetch buffers (io/streamed_hf_writer.h: kHfExportBufferBytes; a test checks they agree).
// Nothing is gathered: each rank writes the masters it already holds.
inline constexpr int64_t kExportHostBufferBytes = int64_t{32} << 20;

struct StagePlan {
  int stage = 0;
  std::string role;  // "whole model", "first", "middle", "last"
  int64_t first_layer = 0, end_layer = 0, dense_layers = 0, moe_layers = 0;
  int world_rank = 0;          // the rank the figures are computed for (the stage's first)
  int64_t parameters = 0;      // elements held
  // Resident, per GPU.
  int64_t compute_weights = 0, master_weights = 0, gradients = 0, moments = 0;
  int64_t resident() const { return compute_weights + master_weights + gradients + moments; }
  // The FP8 matrices' bf16 copies on a GPU (model/transient_compute.h): held in the optimizer phase only,
  // when no activation is.
  int64_t transient_compute = 0;
  // Host (pinned) memory of the offloaded optimizer state: masters, moments, an fp32 gradient copy
  // and (GPU) a bf16 staging copy of the updated weights.
  int64_t host_optimizer = 0;
  // The fp32 host copy of the rank's parameters between the random init (or the checkpoint read) and
  // their placement, and of host_optimizer the part placement pins (the offloaded fp32 masters; the
  // moments, gradient and staging copies come after placement, when the weights' copy is gone).
  int64_t host_weights_at_load = 0, host_masters = 0;
  // The most host memory the rank holds at once at startup: during placement or once its optimizer
  // state exists, whichever is more.
  int64_t host_startup_peak() const { return std::max(host_weights_at_load + host_masters, host_optimizer); }
  // During the Hugging Face export at the end of a run: the pinned optimizer state stays, and the
  // export adds its buffers (kExportHostBufferBytes).
  int64_t host_export = 0;
  int64_t host_export_peak() const { return host_optimizer + host_export; }
  // Activations.
  int64_t activations_per_micro_batch = 0;  // kept by one micro-batch's forward for its backward
  int micro_batches = 0, in_flight = 0;     // per step on this rank; most alive at once under 1F1B
  UseBytes at_peak{};                       // the dynamic bytes live at the peak, by use
  int64_t dynamic_peak() const;
  // What the allocator counts: the passes' peak, or the optimizer phase's when its transient copies are more.
  int64_t allocator_peak() const { return resident() + std::max(dynamic_peak(), transient_compute); }
  // Outside the allocator's count.
  int64_t gemm_workspace = 0, cuda_context = 0, allocator_slack = 0, comm_buffers = 0;
  int64_t device_total() const { return allocator_peak() + gemm_workspace + cuda_context + allocator_slack + comm_buffers; }
};

struct MemoryPlan {
  PlanRequest request;
  std::vector<StagePlan> stages;
  std::vector<int64_t> pinned_host_per_node;
  std::vector<int64_t> startup_host_per_node;  // the node's ranks' host_startup_peak, summed
  std::vector<int64_t> export_host_per_node;   // the node's ranks' host_export_peak, summed
  std::vector<int> stage_of_rank;               // index: world rank
  std::vector<std::string> notes;
  const StagePlan& largest() const;  // the stage with the largest device total
};

// Throws naming the flag when the layout does not work for the model (as quill train would).
MemoryPlan plan_memory(const PlanRequest& request);

}  // namespace quill::plan
