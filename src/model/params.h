// The parameter table: every tensor of the text trunk by its checkpoint name (`model.llm.*`), with
// quill's internal shape, its dtype in a checkpoint, whether it trains, and its fp32 master value
// and gradient. Internal layout equals the checkpoint's except the gate/up (`w13`) tensors, whose rows
// quill keeps split (gate rows [0, F), up rows [F, 2F)) while checkpoints interleave them (even rows
// gate, odd rows up); io converts (docs/decisions/gate-up-layout.md).
#pragma once

#include <string>
#include <vector>

#include "comm/comm.h"
#include "model/config.h"
#include "ops/fp8.h"
#include "parallel/layout.h"
#include "parallel/shard_spec.h"
#include "tensor/tensor.h"

namespace quill {

// One tensor of the whole model, before any layout: its global shape and how it splits.
struct ParamDecl {
  std::string name;
  Shape shape;  // global
  DType checkpoint_dtype = DType::BF16;
  bool is_buffer = false, gate_up_interleaved = false, routed_expert = false;
  int64_t layer = 0;  // decoder layer it belongs to (the embedding: 0; the head: the last)
  ShardRule rule;
};
// Every tensor of the text trunk in table order (validates the config).
std::vector<ParamDecl> param_decls(const InklingConfig& config);
// Whether every tensor splits under the layout's sizes (heads, kv heads, vocabulary, FFN widths,
// experts), from the config alone: throws naming the tensor, the dimension and the flag. What
// launchers call before any process group or weight exists.
void check_model_split(const InklingConfig& config, const LayoutSpec& spec);

struct Param {
  std::string name;
  Shape shape;                      // this rank's (local) shape: shard.local_shape
  ShardSpec shard;                  // how it splits over the layout (whole on one rank)
  DType checkpoint_dtype = DType::BF16;
  bool is_buffer = false;           // the router's selection bias: in the checkpoint, never trained
  bool trainable = true;            // false for buffers and frozen parameters
  bool weight_decay = true;         // Megatron: no decay on 1-D parameters
  bool gate_up_interleaved = false; // checkpoint interleaves gate/up rows on dimension -2
  bool routed_expert = false;       // a routed expert's weights: reduced over expert data parallelism
  int64_t layer = 0;                // ParamDecl::layer: its gradient is final once that layer's backward is done
  // The fp32 value. Before placement: the host value (init or checkpoint). After placement
  // (model/param_placement.h): the whole tensor on the device when this rank holds it whole (its
  // compute copy is fp32, or its bucket's master is not sharded); otherwise undefined, and the fp32
  // master of this rank's shard lives in its bucket (ParamBucket::master).
  Tensor value;
  Tensor compute;                   // what the ops read: fp32 on the CPU reference; on a GPU a bf16
                                    // copy for matrices, fp32 for the precision policy's tensors
  Tensor grad;                      // fp32 accumulation, same shape; undefined when not trainable
  int bucket = -1;                  // its bucket (ParamTable::buckets), -1 when not trainable
  int64_t bucket_offset = 0;        // where it starts in that bucket's flat buffers
  // True from zero_grads(kOnFirstWrite) until the step's first write: `grad` still holds the previous
  // step's sums, so that write must overwrite it (model/layer_util.h: grad_write, grad_target).
  // Mutable: layers hold const parameters and record their writes through them.
  mutable bool grad_unset = false;
  // --fp8-recipe blockwise (docs/fp8.md): this matrix's GEMMs run in FP8 E4M3 (model/fp8_params.h marks
  // which). They read fp8_copy, the 128x128-block quantisation of `compute`, remade on first use after
  // `compute` changed (compute_version moved): once per optimizer step, whatever the micro-batches.
  bool fp8 = false;
  // Its weight gradient in FP8 too (else from the bf16 operands: --no-fp8-wgrad, ops/fp8_options.h).
  bool fp8_wgrad = false;
  int64_t compute_version = 0;       // bumped by every rewrite of `compute` (ParamTable::compute_changed)
  mutable ops::Fp8Tensor fp8_copy;
  mutable int64_t fp8_version = -1;  // the compute_version fp8_copy was made from
};

// Trainable parameters that are reduced over the same group and compute in the same dtype share
// buckets: each one flat gradient buffer (one reduce-scatter), one flat compute buffer (one
// all-gather of the updated weights, in the compute dtype) and one sharded fp32 master. A bucket
// holds whole layers: the parameters of one kind are cut into buckets of at least the DDP bucket
// size (model/bucket_split.h), the last layers first, so that each can be reduced as soon as the
// backward has passed its first layer. Members lie back to back in table order; the buffers are
// padded with zeros to a multiple of the group size so that they split into equal shards, rank r
// of the group owning [r*S, (r+1)*S).
struct ParamBucket {
  const char* group = "dp-cp";  // whose ranks sum its gradients and shard its optimizer state
  Comm* comm = nullptr;         // that group's communicator; null when it has one rank
  int group_size = 1, group_rank = 0;
  DType compute_dtype = DType::F32;
  // Members replicated across tensor-parallel ranks are bucketed apart: their gradient norm counts
  // on the first tensor-parallel rank only (false elsewhere), so that every element counts once.
  bool tp_replicated = false;
  bool counts_in_norm = true;
  // Members whose gradients each tensor-parallel rank computes only a share of
  // (ShardSpec::sum_grad_over_tp): summed over tp_comm before the group's reduction.
  bool sum_over_tp = false;
  Comm* tp_comm = nullptr;
  std::vector<size_t> members;  // indices into ParamTable::params(), in table order
  int64_t first_layer = 0, last_layer = 0;  // the members' layers (Param::layer) lie in [first, last]
  int64_t numel = 0;            // padded
  Tensor grads;                 // F32 [numel]
  Tensor compute;               // compute_dtype [numel]; undefined between writes when compute_transient
  // Every member is an FP8 matrix on a GPU (model/transient_compute.h): the GEMMs read only the members'
  // FP8 copies, so `compute` is held only while the weights are written (placement, an optimizer step, a
  // refresh from the masters) and released once the FP8 copies are made from it.
  bool compute_transient = false;
  // This rank's fp32 master weights of its shard, shard-local elements [0, shard_end - shard_begin),
  // in two parts. Under CPU offload (model/offload_split.h) the head [0, offload_end) lives in
  // `host_master` (F32 [offload_end], pinned host memory) and is updated on the host; `master` is
  // F32 [shard - offload_end] on the device for the rest, shard-local element offload_end + i at
  // index i. When the compute dtype is F32, `master` is its range's own view of `compute` (one copy
  // serves both; the offloaded range of `compute` is a copy of host_master); else a buffer of its own.
  Tensor master;
  Tensor host_master;
  int64_t shard_begin = 0, shard_end = 0;
  int64_t offload_end = 0;
  bool master_is_compute() const { return compute_dtype == DType::F32; }
  // The master of shard-local elements [local, local + n), which must lie on one side of offload_end.
  Tensor master_range(int64_t local, int64_t n) const;
};

class ParamTable {
 public:
  // Builds the table for a config, values and grads allocated (zero) on the host: the whole model,
  // or only this rank's share of `layout` (its stage's tensors, its slices of the split ones).
  static ParamTable for_config(const InklingConfig& config);
  static ParamTable for_config(const InklingConfig& config, const Layout& layout);

  std::vector<Param>& params() { return params_; }
  const std::vector<Param>& params() const { return params_; }
  Param& at(const std::string& name);  // throws naming the missing parameter
  const Param& at(const std::string& name) const;
  Param* find(const std::string& name);

  // After placement (model/param_placement.h): the buckets of the trainable parameters; empty before.
  std::vector<ParamBucket>& buckets() { return buckets_; }
  const std::vector<ParamBucket>& buckets() const { return buckets_; }
  bool placed() const { return placed_; }
  void set_placed() { placed_ = true; }
  const Tensor& value(const std::string& name) const { return at(name).value; }
  // Every compute copy was rewritten (an optimizer step, a refresh): derived copies (Param::fp8_copy)
  // are stale.
  void compute_changed() {
    for (Param& p : params_) ++p.compute_version;
  }
  // An optimizer step rewrote the trainable parameters' compute copies; a frozen one's is what it was (and on a
  // GPU a frozen FP8 matrix's bf16 copy is gone once quantised: its FP8 copy must stay current).
  void trainable_compute_changed() {
    for (Param& p : params_)
      if (p.trainable) ++p.compute_version;
  }

  // Freezes every parameter whose name matches one of the patterns (a '*' matches any run of characters).
  void freeze(const std::vector<std::string>& patterns);
  // Fills values as transformers' _init_weights does for a fresh model: normal(0, std) for matrices,
  // the relative-bias tables and router weights; ones for norms and global scales; zeros for the
  // router bias; short convolutions normal(0, std). Deterministic in (seed, name, global element
  // index): every layout draws the same values. The work goes to all cores in pieces of about
  // piece_elements (a parameter for tests; any piece size gives the same bits).
  void init_random(uint64_t seed, double std = 0.02, int64_t piece_elements = int64_t{1} << 20);

 private:
  std::vector<Param> params_;
  std::vector<ParamBucket> buckets_;
  bool placed_ = false;
};

// miles' frozen set: the relative-bias tables and every global scale.
std::vector<std::string> miles_frozen_patterns();
bool name_matches(const std::string& name, const std::string& pattern);

}  // namespace quill
