// Which part of a rank's optimizer shard lives in host memory under CPU offload (Megatron's
// --optimizer-cpu-offload --optimizer-offload-fraction F). F is the share of the shard's elements
// (fp32 master weights and both Adam moments alike: every element has all three). Each bucket
// offloads the head of its shard, shard-local elements [0, h_b), with h_b = F x (its shard) rounded
// to a multiple of kOffloadAlign elements (all of it at F = 1): the same share of every bucket, so
// that the fp32 and bf16 buckets and every data-parallel rank offload alike, and one contiguous
// range per bucket, one device->host copy of its gradients and one host->device copy of its
// updated weights. The choice depends only on the shard sizes and F: deterministic, and the same on
// a resume (checkpoints are keyed by global element ranges, so another F resumes too).
// docs/decisions/optimizer-offload.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/params.h"

namespace quill {

// 64 elements: 256 bytes of fp32 and 128 of bf16, so that both sides of the boundary keep the
// 16-byte alignment the vectorised kernels want.
inline constexpr int64_t kOffloadAlign = 64;

// h_b for each shard size: round(F x size / 64) x 64, capped at size; F = 1 offloads all of it.
std::vector<int64_t> offload_split(const std::vector<int64_t>& shard_sizes, double fraction);

// One line per bucket with an offloaded part: its group and dtype, the range and the parameters
// it covers (first and last, with how many), and the total share, for the run's log.
std::vector<std::string> describe_offload(const ParamTable& table);

}  // namespace quill
