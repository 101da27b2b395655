// Column gather/scatter between a [N, W] tensor and a contiguous [N, w] block of its columns
// [col, col + w): the router's weights are one [N, k + S] tensor that the routed and shared paths
// read in parts.
#pragma once

#include "ops/device_context.h"

namespace quill::ops {

void get_columns(const DeviceContext& ctx, const Tensor& x_NW, int64_t col, const Tensor& out_Nw);  // out = x[:, col:col+w]
void set_columns(const DeviceContext& ctx, const Tensor& x_NW, int64_t col, const Tensor& v_Nw);    // x[:, col:col+w] = v

}  // namespace quill::ops
