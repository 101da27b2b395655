// The stage barriers both grouped wgmma kernels share (grouped_gemm_wg.cu, grouped_gemm_fp8_wg.cu): a ring of
// `stages` stages filled by one producer thread's TMA loads and drained by the consumer warps. Stage it % stages of
// the it-th load is full once the producer's arrival and the loads' bytes are in (full barrier), and free once every
// consumer warp has arrived (empty barrier); the phase parity of round it / stages tells the waits apart.
#pragma once

#include "ops/cuda/attention_wg.cuh"

namespace quill::cuda::grouped_gemm {

struct StageBarriers {
  uint32_t base;  // shared address of 2 x stages mbarriers
  int stages;
  __device__ uint32_t full(int s) const { return base + 8 * s; }
  __device__ uint32_t empty(int s) const { return base + 8 * (stages + s); }
  // By one thread, before a __syncthreads: full barriers take one arrival (the producer's, with its bytes), empty
  // ones one per consumer warp.
  __device__ void init(int consumer_warps) const {
    for (int s = 0; s < stages; ++s) {
      attn_wg::mbar_init(full(s), 1);
      attn_wg::mbar_init(empty(s), consumer_warps);
    }
    attn_wg::mbar_init_fence();
  }
  // The producer, before the it-th load: waits until its stage is free (a fresh barrier passes parity 1 at once).
  __device__ void wait_free(int it) const {
    attn_wg::mbar_wait(empty(it % stages), ((it / stages) & 1) ^ 1, 100 + it % stages);
  }
  // A consumer, before reading the it-th load.
  __device__ void wait_full(int it) const { attn_wg::mbar_wait(full(it % stages), (it / stages) & 1, it % stages); }
};

}  // namespace quill::cuda::grouped_gemm
