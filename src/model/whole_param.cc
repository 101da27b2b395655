#include "model/whole_param.h"

namespace quill {

Param whole_param(const ParamDecl& d) {
  Param p;
  p.name = d.name;
  p.shape = d.shape;
  p.shard = make_shard_spec(d.name, d.shape, ShardRule{}, LayoutSpec{}, GridCoords{});
  p.checkpoint_dtype = d.checkpoint_dtype;
  p.is_buffer = d.is_buffer;
  p.trainable = !d.is_buffer;
  p.weight_decay = d.shape.size() >= 2;  // Megatron: no decay on 1-D parameters
  p.gate_up_interleaved = d.gate_up_interleaved;
  p.routed_expert = d.routed_expert;
  return p;
}

}  // namespace quill
