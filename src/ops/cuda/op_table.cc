// The CUDA backend's op table: every op the backend implements, by the public op it serves.
// An op missing here fails with "not implemented on the CUDA backend" when a CUDA context calls it.
#include "ops/op_table.h"

#include "ops/cuda/cuda_context.h"
#include "ops/cuda/gather_rows.h"
#include "ops/cuda/kernels.h"

namespace quill {

namespace {
// The backend runs a collective as it comes; the profiler's wrapper of this entry times it.
void run_collective(const DeviceContext&, const char*, const Tensor&, const std::function<void()>& body) { body(); }

OpTable make_table() {
  OpTable t;
  // Entries are added family by family as kernels land (see kernels.h for the full list).
  // GEMMs (gemm.cu), element-wise (elementwise.cu), columns, convert, AdamW.
  t.linear_forward = &cuda::linear_forward;
  t.linear_backward_input = &cuda::linear_backward_input;
  t.linear_backward_weight = &cuda::linear_backward_weight;
  t.grouped_linear_forward = &cuda::grouped_linear_forward;
  t.grouped_linear_backward_input = &cuda::grouped_linear_backward_input;
  t.grouped_linear_backward_weight = &cuda::grouped_linear_backward_weight;
  t.grouped_linear_backward_weight_pair = &cuda::grouped_linear_backward_weight_pair;
  t.fp8_quantize = &cuda::fp8_quantize;
  t.fp8_dequantize = &cuda::fp8_dequantize;
  t.fp8_linear_forward = &cuda::fp8_linear_forward;
  t.fp8_linear_backward_input = &cuda::fp8_linear_backward_input;
  t.fp8_linear_backward_weight = &cuda::fp8_linear_backward_weight;
  t.fp8_grouped_linear_forward = &cuda::fp8_grouped_linear_forward;
  t.fp8_grouped_linear_backward_input = &cuda::fp8_grouped_linear_backward_input;
  t.fp8_grouped_linear_backward_weight = &cuda::fp8_grouped_linear_backward_weight;
  t.copy = &cuda::copy;
  t.gather_rows = &cuda::gather_rows;
  t.gather_rows_from_pair = &cuda::gather_rows_from_pair;
  t.regroup_index = &cuda::regroup_index;
  t.add_inplace = &cuda::add_inplace;
  t.scale_inplace = &cuda::scale_inplace;
  t.scale_by_scalar = &cuda::scale_by_scalar;
  t.scale_by_scalar_backward = &cuda::scale_by_scalar_backward;
  t.scale_rows = &cuda::scale_rows;
  t.scale_rows_backward = &cuda::scale_rows_backward;
  t.sum_squares = &cuda::sum_squares;
  t.get_columns = &cuda::get_columns;
  t.set_columns = &cuda::set_columns;
  t.convert = &cuda::convert;
  t.zero = &cuda::zero;
  t.transfer = &cuda::transfer;
  t.transfer_async = &cuda::transfer_async;
  t.wait_transfers = &cuda::wait_transfers;
  t.transfer_fence = &cuda::transfer_fence;
  t.wait_transfer_fence = &cuda::wait_transfer_fence;
  t.bind_host_thread = &cuda::bind_host_thread;
  t.adamw_update = &cuda::adamw_update;
  t.attention_forward = &cuda::attention_forward;
  t.attention_backward = &cuda::attention_backward;
  // Embedding, norms, short convolutions, SwiGLU, the loss, the router and the MoE token plumbing.
  t.embedding_forward = &cuda::embedding_forward;
  t.embedding_backward = &cuda::embedding_backward;
  t.embedding_forward_shard = &cuda::embedding_forward_shard;
  t.embedding_backward_shard = &cuda::embedding_backward_shard;
  t.rmsnorm_forward = &cuda::rmsnorm_forward;
  t.rmsnorm_backward = &cuda::rmsnorm_backward;
  t.short_conv_forward = &cuda::short_conv_forward;
  t.short_conv_backward = &cuda::short_conv_backward;
  t.swiglu_forward = &cuda::swiglu_forward;
  t.swiglu_backward = &cuda::swiglu_backward;
  t.cross_entropy_forward_backward = &cuda::cross_entropy_forward_backward;
  t.cross_entropy_shard_stats = &cuda::cross_entropy_shard_stats;
  t.cross_entropy_shard_backward = &cuda::cross_entropy_shard_backward;
  t.router_forward = &cuda::router_forward;
  t.router_forward_replay = &cuda::router_forward_replay;
  t.router_backward = &cuda::router_backward;
  t.router_gate_forward = &cuda::router_gate_forward;
  t.router_gate_backward_input = &cuda::router_gate_backward_input;
  t.router_gate_backward_weight = &cuda::router_gate_backward_weight;
  t.moe_route_plan = &cuda::moe_route_plan;
  t.moe_permute = &cuda::moe_permute;
  t.moe_permute_backward = &cuda::moe_permute_backward;
  t.moe_unpermute = &cuda::moe_unpermute;
  t.moe_unpermute_backward = &cuda::moe_unpermute_backward;
  t.collective = &run_collective;
  return t;
}
}  // namespace

const OpTable& cuda_op_table() {
  static const OpTable table = make_table();
  return table;
}

}  // namespace quill
