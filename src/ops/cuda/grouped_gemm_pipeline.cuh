// The stage barriers both grouped wgmma kernels share (grouped_gemm_wg.cu, grouped_gemm_fp8_wg.cu): a ring of
// `stages` stages filled by one producer thread's TMA loads and drained by the consumer warps. Stage it % stages of
// the it-th load is full once the producer's arrival and the loads' bytes are in (full barrier), and free once every
// consumer warp has arrived (empty barrier); the phase parity of round it / stages tells the waits apart.
#pragma once

#include <algorithm>

#include "ops/cuda/attention_wg.cuh"
#include "ops/cuda/cuda_resources.h"

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

// ---- clusters of two CTAs (PTX ISA 8.x: %cluster_ctarank, barrier.cluster, mapa, .multicast::cluster) ----

// Every thread of both CTAs of the cluster (divergent threads allowed: no .aligned), with release / acquire order.
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}

template <int kCtas>
struct ClusterPair {
  static_assert(kCtas == 1 || kCtas == 2, "grouped_gemm: clusters of one or two CTAs");
  uint32_t rank;  // this CTA's rank in its cluster (0 without clusters)
  // The unit (a tile, or the pair's wide tile) this CTA's cluster starts with, and the stride between its units.
  int first, stride;

  __device__ static ClusterPair here() {
    ClusterPair c{0, static_cast<int>(blockIdx.x), static_cast<int>(gridDim.x)};
    if constexpr (kCtas == 2) {
      uint32_t id, n;
      asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(c.rank));
      asm volatile("mov.u32 %0, %%clusterid.x;\n" : "=r"(id));
      asm volatile("mov.u32 %0, %%nclusterid.x;\n" : "=r"(n));
      c.first = static_cast<int>(id), c.stride = static_cast<int>(n);
    }
    return c;
  }
  // After one thread initialised the barriers (their init fence is cluster-scoped): every thread of the CTA, and with
  // clusters every thread of the peer, before any load or remote arrival.
  __device__ void start() const {
    if constexpr (kCtas == 2) cluster_sync();
    else __syncthreads();
  }
  // Every thread, at the end: with clusters no CTA exits while its peer may still arrive on its barriers.
  __device__ void finish() const {
    if constexpr (kCtas == 2) cluster_sync();
  }
  // A consumer warp's release of a stage: its own CTA's empty barrier, and the peer's (the peer multicasts into it).
  __device__ void release(uint32_t empty_bar) const {
    attn_wg::mbar_arrive(empty_bar);
    if constexpr (kCtas == 2) {
      uint32_t remote;
      asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(empty_bar), "r"(rank ^ 1u));
      asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(remote) : "memory");
    }
  }
  // A TMA tensor load of one box of the shared operand: by this CTA alone, or multicast to both CTAs' shared memory
  // at `dst`, counted on the barrier at `bar` in each.
  __device__ void load_shared_box(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0, int c1) const {
    if constexpr (kCtas == 2) {
      asm volatile(
          "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
          " [%0], [%1, {%3, %4, %5}], [%2], %6;\n" ::"r"(dst),
          "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(0), "h"(static_cast<uint16_t>(3))
          : "memory");
    } else {
      attn_wg::tma_load_3d(dst, map, bar, c0, c1, 0);
    }
  }
};

// Host: launches `kernel` (its dynamic shared memory already allowed) persistently over `units` units of schedule:
// with ctas = 1 one CTA per multiprocessor (fewer for fewer units); with ctas = 2 as many clusters of two CTAs as can
// be resident at once (a GPC's odd multiprocessor may stay idle), each cluster one unit at a time.
template <class Params>
void launch_persistent(const char* op, void (*kernel)(Params), int ctas, int threads, int smem, int64_t units,
                       cudaStream_t stream, const Params& p) {
  int dev = 0, sms = 0;
  QUILL_CUDA_CHECK(cudaGetDevice(&dev));
  QUILL_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  cudaLaunchConfig_t config{};
  cudaLaunchAttribute cluster[1];
  cluster[0].id = cudaLaunchAttributeClusterDimension;
  cluster[0].val.clusterDim.x = static_cast<unsigned>(ctas);
  cluster[0].val.clusterDim.y = 1;
  cluster[0].val.clusterDim.z = 1;
  config.blockDim = dim3(static_cast<unsigned>(threads));
  config.dynamicSmemBytes = static_cast<size_t>(smem);
  config.stream = stream;
  config.attrs = cluster;
  config.numAttrs = ctas > 1 ? 1 : 0;  // one CTA alone: a plain launch
  int slots = sms;
  if (ctas > 1) {
    config.gridDim = dim3(static_cast<unsigned>(sms / ctas * ctas));
    QUILL_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&slots, kernel, &config));
    QUILL_CHECK(slots > 0, "{}: no cluster of {} CTAs of {} bytes of shared memory fits this GPU", op, ctas, smem);
  }
  config.gridDim = dim3(static_cast<unsigned>(std::min<int64_t>(units, slots) * ctas));
  QUILL_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, p));
}

}  // namespace quill::cuda::grouped_gemm
