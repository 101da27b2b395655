// The two points of a stage's passes where overlapped data-parallel communication meets compute
// (docs/decisions/overlap-grad-param.md): the forward tells when it is about to read a layer's weights
// (a bucket's parameter all-gather must be complete by then), the backward when a layer's parameter
// gradients of the pass are written (a bucket all of whose layers are done can start its reduction).
// The stage model calls them; what they do lives above the model (optim/bucket_overlap.h).
#pragma once

#include <cstdint>

namespace quill {

class PassHooks {
 public:
  virtual ~PassHooks() = default;
  // Before the forward first reads the weights of layer `layer` (the embedding and its norm count
  // as layer 0, the final norm and the unembedding as the last layer: ParamDecl::layer).
  virtual void weights_needed(int64_t layer) = 0;
  // In the backward: no parameter of a layer >= `layer` receives another gradient write in this pass.
  virtual void grads_written_from(int64_t layer) = 0;
};

}  // namespace quill
