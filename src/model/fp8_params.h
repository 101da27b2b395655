// Which of Inkling's matrices run their GEMMs in FP8 under --fp8-recipe blockwise (docs/fp8.md), as
// DeepSeek-V3 chose (arXiv:2412.19437, section 3.3): the linear layers of attention (the q, k, v,
// relative-bias and output projections), of the dense MLP and of the shared and routed experts. The
// attention core, the router, the embedding, the LM head and the loss keep their precision, and so do
// the fp32 masters, the gradients and the optimizer.
#pragma once

#include <string>
#include <vector>

#include "model/params.h"
#include "ops/device_context.h"
#include "ops/fp8.h"

namespace quill {

// Whether the tensor of that checkpoint name (model.llm.layers.{i}.*) is one of those matrices.
bool runs_in_fp8(const std::string& name);
// Marks them (Param::fp8) in this rank's table. On CUDA the FP8 GEMMs need both dimensions of every
// such matrix (this rank's shard) a multiple of 16 (ops/fp8.h): refused before any work, naming the
// first tensor that is not.
// With fp8_wgrad (ops::Fp8Options::fp8_wgrad) their weight gradients run in FP8 too (Param::fp8_wgrad).
void mark_fp8_params(ParamTable& params, Device device, bool fp8_wgrad);
// p's quantised copy (128x128 blocks of `compute`, ops/fp8.h), made anew when `compute` changed since
// the last one (Param::compute_version): once per optimizer step however many micro-batches read it. A
// transient bf16 copy (model/transient_compute.h) is quantised when it is released; a stale copy without a
// held bf16 copy is refused, naming the matrix.
const ops::Fp8Tensor& fp8_weight(const DeviceContext& ctx, const Param& p);

// The quantised copies of matrices stacked by rows (Wq, Wk, Wv, Wr of an attention block: one K, each M a
// multiple of 128, so that no 128x128 block straddles two), joined into one [sum of M, K] copy: the codes and
// factors by rows and, on CUDA, the transposed codes and factors by columns; the same bytes as quantising the joined
// matrix. Made on first use and again whenever a part's copy was remade (its fp8_version moved): once per optimizer
// step. Undefined (nothing made) when the parts do not stack: not all FP8, or a part's M not a multiple of 128.
class StackedFp8Copy {
 public:
  // Whether matrices of these row counts stack: each a whole number of 128-row blocks (the memory plan asks it
  // of the shapes alone).
  static bool rows_stack(const std::vector<int64_t>& rows);
  static bool stacks(const std::vector<const Param*>& parts);
  const ops::Fp8Tensor& get(const DeviceContext& ctx, const std::vector<const Param*>& parts);

 private:
  ops::Fp8Tensor stack_;
  std::vector<int64_t> versions_;  // each part's fp8_version when joined
};

}  // namespace quill
