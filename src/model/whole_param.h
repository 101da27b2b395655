// The whole tensor a declaration describes, as a Param without values: global shape, the one-rank
// shard spec, the declaration's dtype and flags. What describes the whole model without allocating
// it: the streamed export's file plan (io/streamed_hf_writer.h) and the gather's table.
#pragma once

#include "model/params.h"

namespace quill {

Param whole_param(const ParamDecl& d);

}  // namespace quill
