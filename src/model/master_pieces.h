// The pieces of the fp32 master weights this rank owns: for each bucket member, the elements of its
// shard of the bucket (the distributed optimizer's), cut into runs that are contiguous both in the
// whole parameter (flattened, global index) and in the bucket's shard. Without the tensor-parallel
// replicas' copies every element of every trainable parameter is in exactly one rank's pieces: what
// a training checkpoint saves (train/train_checkpoint.h) and what the streamed Hugging Face export
// writes (io/streamed_hf_export.h), each rank its own, with no gather.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/params.h"

namespace quill {

struct MasterPiece {
  size_t param, bucket;  // indices into the table's params() and buckets()
  int64_t begin, end;    // elements [begin, end) of the whole parameter, flattened
  int64_t at;            // where they start in the bucket's shard (ParamBucket::master_range)
};

// This rank's pieces. replicas = false skips the buckets of tensor-parallel replicas except on the
// first tensor-parallel rank (the others hold the same values), so that each element is in one
// rank's pieces; true gives every piece the rank holds (what a load fills). Pieces are also cut at
// the CPU-offload boundary, so that each lies in host or in device memory.
std::vector<MasterPiece> master_pieces(const ParamTable& params, bool replicas);

}  // namespace quill
