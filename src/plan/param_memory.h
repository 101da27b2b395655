// One rank's parameter memory, computed from the declarations quill builds its tables from
// (model/params.h: param_decls, split by parallel/shard_spec.h for the rank's coordinates) and the
// placement rules of model/param_placement.cc, without allocating anything:
//   - trainable tensors are grouped into kinds by (reduction group, compute dtype, replicated over
//     tensor parallelism, gradient summed over tensor parallelism, FP8 matrix on a GPU), each kind cut into buckets of whole
//     layers by the DDP bucket size (model/bucket_split.h); a bucket's numel is padded to a multiple of
//     its group's size;
//   - each bucket holds an fp32 gradient buffer [numel] (bf16 with --main-grads-dtype bf16) and a
//     compute buffer [numel] in its compute dtype (bf16 for matrices on a GPU, fp32 otherwise);
//   - the rank owns the shard numel / group_size of each bucket: its fp32 masters (a buffer of their own
//     when the compute dtype is bf16; a view of the compute buffer when it is fp32) and both moments;
//   - frozen tensors and buffers keep a whole fp32 value, plus a bf16 compute copy on a GPU for
//     the matrices the precision policy runs in bf16;
//   - with FP8 (--fp8-recipe blockwise), each matrix whose GEMMs run in FP8 (model/fp8_params.h) keeps its
//     quantised copy for the whole step (model/fp8_params.h: fp8_weight): one byte per element of E4M3
//     codes, on a GPU a second byte for the transposed codes the data-gradient GEMM reads, and one fp32
//     scale per 128x128 block. On a GPU their bf16 compute copies (their buckets' compute buffers, a frozen
//     one's own copy) are transient (model/transient_compute.h): held only in the optimizer phase.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "optim/optimizer_memory.h"
#include "parallel/grid.h"
#include "tensor/dtype.h"
#include "tensor/tensor.h"

namespace quill::plan {

struct BucketBytes {
  std::string group;  // "dp-cp" or "edp"
  DType compute = DType::F32;
  bool tp_replicated = false;
  bool sum_over_tp = false;  // its gradients summed over the tensor-parallel group first
  int group_size = 1;
  bool compute_transient = false;  // FP8 matrices on a GPU: the compute buffer only in the optimizer phase
  int64_t numel = 0;  // padded
  int64_t shard() const { return numel / group_size; }
};

struct RankParams {
  int64_t elements = 0;           // parameter elements this rank holds (its stage, its slices)
  int64_t trainable_elements = 0;
  std::vector<BucketBytes> buckets;
  int64_t frozen_value_bytes = 0;    // fp32 values of frozen tensors and buffers
  int64_t frozen_compute_bytes = 0;  // their bf16 compute copies (GPU), the frozen FP8 matrices' excepted
  int64_t frozen_transient_bytes = 0;  // the frozen FP8 matrices' bf16 copies (GPU; made at placement, then released)
  int64_t largest_matrix = 0;        // elements of the largest 2-D weight a GEMM reads (CPU scratch)
  int64_t fp8_copy_bytes = 0;        // the FP8 matrices' quantised copies (codes, transposed codes, scales)

  int64_t compute_bytes() const;                   // bucket compute buffers + frozen values and copies + FP8 copies
  int64_t transient_compute_bytes() const;         // the transient buckets' compute buffers (optimizer phase only)
  int64_t grad_bytes(DType main_grads) const;      // gradient buffers
};

// The parameters of `world_rank` in a layout of `sizes` (its grid: `grid`) with `stage_layers`
// layers per stage, on `device`; `freeze` as ParamTable::freeze takes it; `fp8`: --fp8-recipe blockwise (the
// quantised copies counted); `bucket_size` as
// --ddp-bucket-size (elements; -1: its default for the layout's data-parallel size).
RankParams rank_params(const InklingConfig& config, const Grid& grid, int world_rank,
                       const std::vector<int64_t>& stage_layers, Device device, const std::vector<std::string>& freeze,
                       bool fp8 = false, int64_t bucket_size = -1);

}  // namespace quill::plan
