// Megatron's data-parallel communication flags (its DistributedDataParallelConfig), as quill reads
// them (docs/decisions/overlap-grad-param.md):
// - --overlap-grad-reduce: each gradient bucket's reduction (the tensor-parallel all-reduce of
//   replicated shares, then the reduce-scatter over its group) starts as soon as the stage's last
//   backward of the step has written all of its layers, during that backward; the optimizer waits.
// - --overlap-param-gather: each bucket's all-gather of the updated compute copies starts in the next
//   forward, one bucket ahead of the first one it reads, and is waited on just before its first use.
// - --ddp-bucket-size: the elements per bucket (model/bucket_split.h); unset, Megatron's default
//   max(40M, 1M x dp). The buckets are the same with the overlaps on or off.
#pragma once

#include <cstdint>
#include <string>

#include "model/bucket_split.h"

namespace quill {

struct DdpConfig {
  bool overlap_grad_reduce = false;
  bool overlap_param_gather = false;
  int64_t bucket_size = -1;  // elements; -1: default_bucket_elements(dp)

  int64_t bucket_elements(int data_parallel_size) const {
    return bucket_size > 0 ? bucket_size : default_bucket_elements(data_parallel_size);
  }
};

}  // namespace quill
