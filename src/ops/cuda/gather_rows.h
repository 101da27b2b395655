// The CUDA gather_rows (ops/gather_rows.h), declared apart from kernels.h so that adding it did not
// rebuild every kernel; op_table.cc puts it in the backend's table.
#pragma once

#include "ops/gather_rows.h"

namespace quill::cuda {

void gather_rows(const DeviceContext& ctx, const Tensor& src_RD, const Tensor& index_N, const Tensor& dst_ND);
void gather_rows_from_pair(const DeviceContext& ctx, const Tensor& a_RD, const Tensor& b_SD, const Tensor& index_N,
                           const Tensor& dst_ND);
void regroup_index(const DeviceContext& ctx, const Tensor& counts_SL, const Tensor& index_2R);

}  // namespace quill::cuda
