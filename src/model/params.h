// The parameter table: every tensor of the text trunk by its checkpoint name (`model.llm.*`), with
// quill's internal shape, its dtype in a checkpoint, whether it trains, and its fp32 master value
// and gradient. Internal layout equals the checkpoint's except the gate/up (`w13`) tensors, whose rows
// quill keeps split (gate rows [0, F), up rows [F, 2F)) while checkpoints interleave them (even rows
// gate, odd rows up); io converts (docs/decisions/gate-up-layout.md).
#pragma once

#include <string>
#include <vector>

#include "model/config.h"
#include "tensor/tensor.h"

namespace quill {

struct Param {
  std::string name;
  Shape shape;
  DType checkpoint_dtype = DType::BF16;
  bool is_buffer = false;           // the router's selection bias: in the checkpoint, never trained
  bool trainable = true;            // false for buffers and frozen parameters
  bool weight_decay = true;         // Megatron: no decay on 1-D parameters
  bool gate_up_interleaved = false; // checkpoint interleaves gate/up rows on dimension -2
  Tensor value;                     // fp32 master, on the device that trains it
  Tensor compute;                   // what the ops read: `value` itself on the CPU reference; on a GPU
                                    // a bf16 copy for matrices, `value` for fp32-policy tensors
  Tensor grad;                      // fp32 accumulation, same shape; undefined when not trainable
  // True from zero_grads(kOnFirstWrite) until the step's first write: `grad` still holds the previous
  // step's sums, so that write must overwrite it (model/layer_util.h: grad_write, grad_target).
  // Mutable: layers hold const parameters and record their writes through them.
  mutable bool grad_unset = false;
};

class ParamTable {
 public:
  // Builds the table for a config, values and grads allocated (zero) on the host.
  static ParamTable for_config(const InklingConfig& config);

  std::vector<Param>& params() { return params_; }
  const std::vector<Param>& params() const { return params_; }
  Param& at(const std::string& name);  // throws naming the missing parameter
  const Param& at(const std::string& name) const;
  Param* find(const std::string& name);

  // After placement (model/param_placement.h) the trainable parameters' fp32 values and gradients
  // are views into two flat buffers with equal offsets, in table order: one reduce-scatter, one
  // optimizer shard and one zeroing cover them all. Undefined before placement.
  const Tensor& flat_values() const { return flat_values_; }
  const Tensor& flat_grads() const { return flat_grads_; }
  void set_flat(Tensor values, Tensor grads) {
    flat_values_ = std::move(values);
    flat_grads_ = std::move(grads);
  }
  // Offset of each trainable parameter in the flat buffers (table order; -1 for frozen ones).
  std::vector<int64_t> flat_offsets() const;
  const Tensor& value(const std::string& name) const { return at(name).value; }

  // Freezes every parameter whose name matches one of the patterns (a '*' matches any run of characters).
  void freeze(const std::vector<std::string>& patterns);
  // Fills values as transformers' _init_weights does for a fresh model: normal(0, std) for matrices,
  // the relative-bias tables and router weights; ones for norms and global scales; zeros for the
  // router bias; short convolutions normal(0, std). Deterministic in (seed, name).
  void init_random(uint64_t seed, double std = 0.02);

 private:
  std::vector<Param> params_;
  Tensor flat_values_, flat_grads_;
};

// miles' frozen set: the relative-bias tables and every global scale.
std::vector<std::string> miles_frozen_patterns();
bool name_matches(const std::string& name, const std::string& pattern);

}  // namespace quill
