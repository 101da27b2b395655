// The fixed-order dQ additions of the attention backward kernels (attention_tc_backward.cu, mma.sync;
// attention_wg_backward.cu, wgmma): the fp32 accumulator's layout, the bulk reductions into it and the
// per-block counters that order them (issue 24: the same bits on every run;
// docs/decisions/deterministic-attention-backward.md).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace quill::cuda::attn_dq {

// dQ partial sums reach the fp32 accumulator by bulk reductions (cp.reduce.async.bulk, Hopper's TMA unit):
// each warp (mma.sync backward) or warpgroup (wgmma backward) stages its block of queries by one half of the
// head dims in shared memory and one thread adds it with a single reduction. For that the accumulator is laid out so a warp's block is
// contiguous: [H][2 halves][T rounded up to 64][64], and within a row the 16-byte units are permuted,
// unit u stored at u ^ (t % 8), in shared memory and in global memory alike (so the staging writes hit
// different banks); attn_tc::finish_dq undoes it. (Before: one 256-byte reduction per row, [T, H, 128]: the
// compiler serialised the 16 lanes' reductions, 11% of the kernel's instructions; float2 atomics were as slow.)
__device__ __forceinline__ int dq_unit_col(int row, int col) { return ((((col >> 2) ^ row) & 15) << 2) | (col & 3); }

__device__ __forceinline__ void bulk_reduce_add_f32(float* gdst, const float* ssrc, int bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(gdst),
               "r"(static_cast<uint32_t>(__cvta_generic_to_shared(ssrc))), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }
__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }
__device__ __forceinline__ void fence_proxy_async_smem() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// Between the generic proxy's counter accesses and the bulk (async proxy) reductions to global memory.
__device__ __forceinline__ void fence_proxy_async_global() { asm volatile("fence.proxy.async.global;\n" ::: "memory"); }
__device__ __forceinline__ int load_acquire(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.s32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void add_release(int* p, int v) {
  asm volatile("red.release.gpu.global.add.s32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}
// This block's additions into dQ are complete: the next key tile may add.
__device__ __forceinline__ void release_turn(int*& counter) {
  bulk_wait_all();
  fence_proxy_async_global();
  add_release(counter, 1);
  counter = nullptr;
}

}  // namespace quill::cuda::attn_dq
