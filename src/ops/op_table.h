// The table of a backend's op implementations. A DeviceContext for a GPU carries a pointer to
// the CUDA backend's table; each public op entry point forwards to it when the context is a CUDA
// one, so layer code calls one function whatever the device and quill_ops never links CUDA.
// Each member has exactly the type of the public op it implements.
#pragma once

#include "base/error.h"

#include "ops/adamw.h"
#include "ops/attention.h"
#include "ops/collective.h"
#include "ops/columns.h"
#include "ops/convert.h"
#include "ops/cross_entropy.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/fp8.h"
#include "ops/gather_rows.h"
#include "ops/linear.h"
#include "ops/moe.h"
#include "ops/rmsnorm.h"
#include "ops/router.h"
#include "ops/short_conv.h"
#include "ops/swiglu.h"

namespace quill {

struct OpTable {
  decltype(&ops::adamw_update) adamw_update = nullptr;
  decltype(&ops::attention_forward) attention_forward = nullptr;
  decltype(&ops::attention_backward) attention_backward = nullptr;
  decltype(&ops::get_columns) get_columns = nullptr;
  decltype(&ops::set_columns) set_columns = nullptr;
  decltype(&ops::convert) convert = nullptr;
  decltype(&ops::zero) zero = nullptr;
  decltype(&ops::transfer) transfer = nullptr;
  decltype(&ops::transfer_async) transfer_async = nullptr;
  decltype(&ops::wait_transfers) wait_transfers = nullptr;
  decltype(&ops::transfer_fence) transfer_fence = nullptr;
  decltype(&ops::wait_transfer_fence) wait_transfer_fence = nullptr;
  decltype(&ops::bind_host_thread) bind_host_thread = nullptr;
  decltype(&ops::cross_entropy_forward_backward) cross_entropy_forward_backward = nullptr;
  decltype(&ops::cross_entropy_shard_stats) cross_entropy_shard_stats = nullptr;
  decltype(&ops::cross_entropy_shard_backward) cross_entropy_shard_backward = nullptr;
  decltype(&ops::copy) copy = nullptr;
  decltype(&ops::gather_rows) gather_rows = nullptr;
  decltype(&ops::add_inplace) add_inplace = nullptr;
  decltype(&ops::gather_rows_from_pair) gather_rows_from_pair = nullptr;
  decltype(&ops::regroup_index) regroup_index = nullptr;
  decltype(&ops::scale_inplace) scale_inplace = nullptr;
  decltype(&ops::scale_by_scalar) scale_by_scalar = nullptr;
  decltype(&ops::scale_by_scalar_backward) scale_by_scalar_backward = nullptr;
  decltype(&ops::scale_rows) scale_rows = nullptr;
  decltype(&ops::scale_rows_backward) scale_rows_backward = nullptr;
  decltype(&ops::sum_squares) sum_squares = nullptr;
  decltype(&ops::embedding_forward) embedding_forward = nullptr;
  decltype(&ops::embedding_backward) embedding_backward = nullptr;
  decltype(&ops::embedding_forward_shard) embedding_forward_shard = nullptr;
  decltype(&ops::embedding_backward_shard) embedding_backward_shard = nullptr;
  decltype(&ops::linear_forward) linear_forward = nullptr;
  decltype(&ops::linear_backward_input) linear_backward_input = nullptr;
  decltype(&ops::linear_backward_weight) linear_backward_weight = nullptr;
  decltype(&ops::moe_route_plan) moe_route_plan = nullptr;
  decltype(&ops::moe_permute) moe_permute = nullptr;
  decltype(&ops::moe_permute_backward) moe_permute_backward = nullptr;
  decltype(&ops::moe_unpermute) moe_unpermute = nullptr;
  decltype(&ops::moe_unpermute_backward) moe_unpermute_backward = nullptr;
  decltype(&ops::grouped_linear_forward) grouped_linear_forward = nullptr;
  decltype(&ops::grouped_linear_backward_input) grouped_linear_backward_input = nullptr;
  decltype(&ops::grouped_linear_backward_weight) grouped_linear_backward_weight = nullptr;
  decltype(&ops::grouped_linear_backward_weight_pair) grouped_linear_backward_weight_pair = nullptr;
  decltype(&ops::rmsnorm_forward) rmsnorm_forward = nullptr;
  decltype(&ops::rmsnorm_backward) rmsnorm_backward = nullptr;
  decltype(&ops::router_forward) router_forward = nullptr;
  decltype(&ops::router_forward_replay) router_forward_replay = nullptr;
  decltype(&ops::router_backward) router_backward = nullptr;
  decltype(&ops::router_gate_forward) router_gate_forward = nullptr;
  decltype(&ops::router_gate_backward_input) router_gate_backward_input = nullptr;
  decltype(&ops::router_gate_backward_weight) router_gate_backward_weight = nullptr;
  decltype(&ops::short_conv_forward) short_conv_forward = nullptr;
  decltype(&ops::short_conv_backward) short_conv_backward = nullptr;
  decltype(&ops::swiglu_forward) swiglu_forward = nullptr;
  decltype(&ops::swiglu_backward) swiglu_backward = nullptr;
  decltype(&ops::collective) collective = nullptr;
  // FP8 (ops/fp8.h). On CUDA (fp8_gemm.cc) fp8_quantize_grouped stays null: the activation and gradient
  // tiles are quantised inside the GEMM ops there.
  decltype(&ops::fp8_quantize) fp8_quantize = nullptr;
  decltype(&ops::fp8_quantize_grouped) fp8_quantize_grouped = nullptr;
  decltype(&ops::fp8_dequantize) fp8_dequantize = nullptr;
  decltype(&ops::fp8_linear_forward) fp8_linear_forward = nullptr;
  decltype(&ops::fp8_linear_backward_input) fp8_linear_backward_input = nullptr;
  decltype(&ops::fp8_linear_backward_weight) fp8_linear_backward_weight = nullptr;
  decltype(&ops::fp8_grouped_linear_forward) fp8_grouped_linear_forward = nullptr;
  decltype(&ops::fp8_grouped_linear_backward_input) fp8_grouped_linear_backward_input = nullptr;
  decltype(&ops::fp8_grouped_linear_backward_weight) fp8_grouped_linear_backward_weight = nullptr;
};

// The CUDA implementation of one op, or an error naming it when the context has none.
template <typename Fn>
Fn cuda_op(const DeviceContext& ctx, Fn OpTable::*member, const char* name) {
  QUILL_CHECK(ctx.cuda_ops != nullptr, "{}: a CUDA context without the CUDA backend's op table", name);
  Fn fn = ctx.cuda_ops->*member;
  QUILL_CHECK(fn != nullptr, "{}: not implemented on the CUDA backend", name);
  return fn;
}

}  // namespace quill
