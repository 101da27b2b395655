// Attention forward for head dim 128 on Hopper (sm_90a), FlashAttention-3 style: warpgroup MMA
// (wgmma) with B operands in shared memory, TMA loads counted on mbarriers, a producer warp and two
// consumer warpgroups (warp specialisation), and the softmax of key tile j overlapped
// with the tensor cores' work on S(j+1) = Q K(j+1)^T and O += P(j) V(j). The math is ops/attention.h's;
// the relative bias comes from the banded bias layout (attention_wg_layout.h, written per call by
// attention_wg_bias.cu) as TMA boxes, so it stays in the kernel (no [T, T] tensor).
// Design, predictions and what is least sure: docs/decisions/attention-wgmma.md.
//
// CTA: 384 threads, one (128-query tile, head). Warpgroup 0 is the producer (its first thread issues
// every TMA; the rest exit); warpgroups 1
// and 2 each own 64 query rows. Per consumer and key tile of 64 keys:
//   S = Q K^T       8 x wgmma.m64n64k16, Q and K from shared memory (K-major, 128-byte swizzle)
//   softmax         in fp32 registers: tau, scale, the bias tile (fp32, from shared memory), the mask,
//                   the online max / sum in base 2; P rounded to bf16 is the A operand of the next product
//   O += P V        4 x wgmma.m64n128k16, V from shared memory
//                   (MN-major, 128-byte swizzle)
// Loop order per tile j: issue S(j); issue P(j-1) V(j-1); wait S(j); release K(j); softmax(j); wait
// P(j-1) V(j-1); release V(j-1); rescale O. Pipelines: K, V and each consumer's bias in kStages stages
// with full (TMA bytes) and empty (consumer warps' arrivals) barriers.
// The two consumers take turns issuing their products (FlashAttention-3's scheduler barriers: two named
// barriers, TurnTaking below): consumer 1 issues after consumer 0 has, so one consumer's softmax runs while the
// tensor cores work on the other's products, instead of both softmaxes at once with the tensor cores idle.
#include "ops/cuda/attention_dq.cuh"
#include "ops/cuda/attention_wg.cuh"
#include "ops/cuda/attention_wg.h"
#include "ops/cuda/attention_wg_internal.h"

namespace quill::cuda::attn_wg {
namespace {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
// The narrow form (FwdGeometry) takes no setmaxnreg: ptxas fits its consumer in the launch's 168 registers (no
// spills). The wide form (FwdGeometryWide, on trial) gives the consumers 240 by setmaxnreg and so waits without
// the trap (attention_wg_layout.h; docs/decisions/attention-wgmma.md).
constexpr int kConsumerWarps = 4 * kConsumers;
static_assert(kConsumers == 2, "TurnTaking alternates two consumers");

// The consumers' turns at the tensor cores: named barrier 1 + c is consumer c's turn (bar.sync by its 128 threads
// plus bar.arrive by the other consumer's 128). Consumer 0 opens its own first turn; each consumer passes the turn
// after issuing a step's products. Both issue n_tiles + 1 groups (S(0); S(j) with P(j-1) V(j-1); P V of the last
// tile), so consumer 1 does not pass its last turn: every barrier phase then has exactly 256 arrivals and none is
// left open when the CTA exits.
struct TurnTaking {
  int cons;
  __device__ void open() const {
    if (cons == 0) named_barrier_arrive(1, 256);
  }
  __device__ void wait_turn() const { named_barrier(1 + cons, 256); }
  __device__ void pass_turn(bool last) const {
    if (!(last && cons == 1)) named_barrier_arrive(2 - cons, 256);
  }
};

// Barrier tags in the hang report (mbar_wait): tag = kind + stage (+ 100 * consumer for the bias).
enum : int { kTagQ = 0, kTagKFull = 10, kTagKEmpty = 20, kTagVFull = 30, kTagVEmpty = 40, kTagBFull = 50, kTagBEmpty = 60 };

// Shared-memory addresses (the .shared window) of the buffers and barriers of geometry G
// (attention_wg_layout.h); base is 1024-aligned.
template <class G>
struct Smem {
  uint32_t base;
  __device__ uint32_t q(int cons, int half) const { return base + G::kSmemQ + cons * kTileBytes + half * kBoxBytes; }
  __device__ uint32_t k(int st) const { return base + G::kSmemK + st * G::kKvTileBytes; }
  __device__ uint32_t v(int st) const { return base + G::kSmemV + st * G::kKvTileBytes; }
  __device__ uint32_t bias(int cons, int st) const {
    return base + G::kSmemBias + (cons * G::kBiasStages + st) * G::kBiasBytes;
  }
  __device__ uint32_t bar(int i) const { return base + G::kSmemBarriers + 8 * i; }
  __device__ uint32_t q_full() const { return bar(0); }
  __device__ uint32_t k_full(int st) const { return bar(1 + st); }
  __device__ uint32_t k_empty(int st) const { return bar(1 + G::kKvStages + st); }
  __device__ uint32_t v_full(int st) const { return bar(1 + 2 * G::kKvStages + st); }
  __device__ uint32_t v_empty(int st) const { return bar(1 + 3 * G::kKvStages + st); }
  __device__ uint32_t b_full(int cons, int st) const { return bar(1 + 4 * G::kKvStages + cons * G::kBiasStages + st); }
  __device__ uint32_t b_empty(int cons, int st) const {
    return bar(1 + 4 * G::kKvStages + kConsumers * G::kBiasStages + cons * G::kBiasStages + st);
  }
};


// The loads, each after its stage's previous contents were released: Q once, then per key tile K, the
// bias tiles of both consumers (when the tile has distances below E) and V. One thread of the producer
// warpgroup issues them all in that order (produce).
template <class G>
struct Loader {
  const Smem<G>& sm;
  const WgProblem& p;
  const CUtensorMap *q_map, *k_map, *v_map, *b_map;
  int t0, h, kvh, s_begin, n_tiles;
  int nb = 0;  // bias tiles issued so far

  __device__ __forceinline__ void queries() {
    mbar_arrive_expect_tx(sm.q_full(), kConsumers * kTileBytes);
#pragma unroll
    for (int cons = 0; cons < kConsumers; ++cons)
#pragma unroll
      for (int half = 0; half < 2; ++half)
        tma_load_3d(sm.q(cons, half), q_map, sm.q_full(), half * kHalfCols, h, t0 + kWgRows * cons);
  }
  // K or V of key tile j: per head-dim half, kN / 64 boxes of 64 key rows.
  __device__ __forceinline__ void rows(const CUtensorMap* map, uint32_t full, uint32_t empty, uint32_t dst, int j, int tag) {
    const int st = j % G::kKvStages;
    mbar_wait_as<G::kTimedWaits>(empty, ((j / G::kKvStages) & 1) ^ 1, tag + st);
    mbar_arrive_expect_tx(full, G::kKvTileBytes);
#pragma unroll
    for (int half = 0; half < 2; ++half)
#pragma unroll
      for (int rb = 0; rb < G::kN / kWgRows; ++rb)
        tma_load_3d(dst + half * G::kHalfBytes + rb * kBoxBytes, map, full, half * kHalfCols, kvh,
                       s_begin + j * G::kN + kWgRows * rb);
  }
  __device__ __forceinline__ void keys(int j) {
    if (j < n_tiles) rows(k_map, sm.k_full(j % G::kKvStages), sm.k_empty(j % G::kKvStages), sm.k(j % G::kKvStages), j, kTagKEmpty);
  }
  __device__ __forceinline__ void values(int j) {
    if (j < n_tiles) rows(v_map, sm.v_full(j % G::kKvStages), sm.v_empty(j % G::kKvStages), sm.v(j % G::kKvStages), j, kTagVEmpty);
  }
  __device__ __forceinline__ void bias(int j) {
    const int s0 = s_begin + j * G::kN;
    if (j >= n_tiles || !(p.has_bias && cta_tile_has_bias<G::kN>(t0, s0, p.E))) return;
    const int bst = nb % G::kBiasStages;
    const uint32_t bph = (nb / G::kBiasStages) & 1;
#pragma unroll
    for (int cons = 0; cons < kConsumers; ++cons) {
      mbar_wait_as<G::kTimedWaits>(sm.b_empty(cons, bst), bph ^ 1, kTagBEmpty + bst + 100 * cons);
      mbar_arrive_expect_tx(sm.b_full(cons, bst), G::kBiasBytes);
#pragma unroll
      for (int box = 0; box < G::kN / kBiasCols; ++box) {
        const int a = s0 / kBiasCols + box;  // key block of 32
        tma_load_4d(sm.bias(cons, bst) + box * kBoxBytes, b_map, sm.b_full(cons, bst), 0,
                       t0 + kWgRows * cons - kBiasCols * a, a, h);
      }
    }
    ++nb;
  }
  __device__ __forceinline__ void produce() {
    queries();
    for (int j = 0; j < n_tiles; ++j) {
      keys(j);
      bias(j);
      values(j);
    }
  }
};

// One consumer warpgroup's 64 query rows: the state of the online softmax and the products.
template <class G>
struct Consumer {
  static constexpr int kN = G::kN;
  const Smem<G>& sm;
  const WgProblem& p;
  int cons, t0, tw, lane, warp, g, cq;
  int t_row[2];
  float coef_qk[2], coef_bias[2], m[2], l[2];
  int nb = 0;  // bias tiles consumed so far

  __device__ Consumer(const Smem<G>& sm_, const WgProblem& p_, int cons_, int t0_, int tid)
      : sm(sm_), p(p_), cons(cons_), t0(t0_), tw(t0_ + kWgRows * cons_) {
    lane = tid & 31;
    warp = tid >> 5;
    g = lane >> 2;
    cq = lane & 3;
#pragma unroll
    for (int sel = 0; sel < 2; ++sel) {
      t_row[sel] = tw + 16 * warp + g + 8 * sel;
      const float tau = (p.tau != nullptr && t_row[sel] < p.T) ? p.tau[t_row[sel]] : 1.0f;
      coef_qk[sel] = tau * p.scale * kLog2e;
      coef_bias[sel] = tau * kLog2e;
      m[sel] = -INFINITY;
      l[sel] = 0.0f;
    }
  }

  // Q stays in shared memory for the whole CTA (S = Q K^T reads it through a descriptor): keeping its
  // fragments in registers (32 per thread) pushed the consumer past ptxas's budget (spills, serialised
  // wgmma; docs/decisions/attention-wgmma.md).
  __device__ void wait_q() { mbar_wait_as<G::kTimedWaits>(sm.q_full(), 0, kTagQ); }

  // Issues S = Q K^T for the key tile in stage st (one commit group).
  __device__ void issue_qk(float (&s)[kN / 2], int st) {
    const uint32_t kb = sm.k(st), qb = sm.q(cons, 0);
    fence_regs(s);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 8; ++kk) {
      // k-step kk: head-dim columns 16 kk .. 16 kk + 15 = 32 bytes into head-dim half kk / 4 of both tiles
      // (Q's halves are one box apart, K's kN rows apart).
      const uint32_t qoff = (kk / 4) * kBoxBytes + (kk % 4) * 32, koff = (kk / 4) * G::kHalfBytes + (kk % 4) * 32;
      if constexpr (kN == 64)
        wgmma_m64n64k16_ss(s, k_major_desc(qb + qoff), k_major_desc(kb + koff), kk > 0 ? 1 : 0);
      else
        wgmma_m64n128k16_ss(s, k_major_desc(qb + qoff), k_major_desc(kb + koff), kk > 0 ? 1 : 0);
    }
    wgmma_commit();
    fence_regs(s);
  }

  // Issues O += P V for the value tile in stage st (one commit group).
  __device__ void issue_pv(float (&o)[64], const uint32_t (&pf)[kN / 16][4], int st) {
    const uint32_t vb = sm.v(st);
    fence_regs(o);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kN / 16; ++kk) {
      const uint32_t(&a)[4] = pf[kk];
      // Keys 16 kk .. 16 kk + 15 are rows 16 kk .. of both head-dim halves: 2 KiB per k-step; the halves
      // are kN rows (G::kHalfBytes) apart, the MN-major descriptor's LBO.
      const uint32_t rows = vb + kk * 16 * kRowBytes;
      wgmma_m64n128k16_rs_tb(o, a, mn_major_desc(rows, G::kHalfBytes), 1);
    }
    wgmma_commit();
    fence_regs(o);
  }

  __device__ void release(uint32_t bar) {
    __syncwarp();
    if (lane == 0) mbar_arrive(bar);
  }

  // Waits for the bias tile of key tile s0 (when it has one) and returns its shared-memory address, else 0.
  // Called before the tile's products are issued, so no wait spins inside the wgmma pipeline.
  __device__ uint32_t acquire_bias(int s0) {
    if (!(p.has_bias && cta_tile_has_bias<kN>(t0, s0, p.E))) return 0;
    const int bst = nb % G::kBiasStages;
    mbar_wait_as<G::kTimedWaits>(sm.b_full(cons, bst), (nb / G::kBiasStages) & 1, kTagBFull + bst + 100 * cons);
    return sm.bias(cons, bst);
  }

  // Scores of key tile s0 -> probabilities (bf16 A fragments in pf) and the running max / sum; corr is
  // the factor the output accumulated so far must be scaled by. bias_base: acquire_bias(s0).
  __device__ void softmax(float (&s)[kN / 2], int s0, uint32_t bias_base, uint32_t (&pf)[kN / 16][4], float (&corr)[2]) {
    const bool full = wg_tile_fully_allowed<kN>(tw, s0, p.T, p.window);
    const bool has_bias = bias_base != 0;
    float row_max[2] = {-INFINITY, -INFINITY};
    // The elementwise work is what bounds this kernel's issue slots (about as many as the tile's two products
    // take at peak), so tiles with nothing masked (most of a global layer's; a local layer's inner ones) skip
    // the mask's integer work, and those without bias also the bias: the same values as the general path
    // (fmaf(c, s, 0) is c * s).
    if (full && !has_bias) {
#pragma unroll
      for (int i = 0; i < kN / 2; ++i) {
        const int sel = (i >> 1) & 1;
        s[i] *= coef_qk[sel];
        row_max[sel] = fmaxf(row_max[sel], s[i]);
      }
    } else if (full) {
#pragma unroll
      for (int q = 0; q < kN / 4; ++q) {
        const int sel = q & 1, col = 8 * (q >> 1) + 2 * cq, row = 16 * warp + g + 8 * sel;
        const float2 b = ld_shared_f2(bias_base + (col / kBiasCols) * kBoxBytes + swizzle128(row, 4 * (col % kBiasCols)));
        s[2 * q] = fmaf(coef_qk[sel], s[2 * q], coef_bias[sel] * b.x);
        s[2 * q + 1] = fmaf(coef_qk[sel], s[2 * q + 1], coef_bias[sel] * b.y);
        row_max[sel] = fmaxf(row_max[sel], fmaxf(s[2 * q], s[2 * q + 1]));
      }
    } else {
#pragma unroll
      for (int q = 0; q < kN / 4; ++q) {  // accumulator pair 2q, 2q + 1: one row, two adjacent keys
        const int sel = q & 1, col = 8 * (q >> 1) + 2 * cq, row = 16 * warp + g + 8 * sel;
        float2 b = make_float2(0.0f, 0.0f);
        if (has_bias) b = ld_shared_f2(bias_base + (col / kBiasCols) * kBoxBytes + swizzle128(row, 4 * (col % kBiasCols)));
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int t = t_row[sel], key = s0 + col + e;
          // Branch-free within the tile: every operand is computed, the mask is one select.
          const bool ok = full | ((t < p.T) & (key <= t) & ((p.window == 0) | (t - key < p.window)));
          const float x = ok ? fmaf(coef_qk[sel], s[2 * q + e], coef_bias[sel] * (e ? b.y : b.x)) : -INFINITY;
          s[2 * q + e] = x;
          row_max[sel] = fmaxf(row_max[sel], x);
        }
      }
    }
    if (has_bias) {
      release(sm.b_empty(cons, nb % G::kBiasStages));
      ++nb;
    }
    float m_use[2];
#pragma unroll
    for (int sel = 0; sel < 2; ++sel) {
      // The 4 threads of a row are lanes 4g .. 4g+3.
      row_max[sel] = fmaxf(row_max[sel], __shfl_xor_sync(0xffffffffu, row_max[sel], 1));
      row_max[sel] = fmaxf(row_max[sel], __shfl_xor_sync(0xffffffffu, row_max[sel], 2));
      const float m_new = fmaxf(m[sel], row_max[sel]);
      // A row with nothing allowed so far keeps m = -inf; subtract 0 then, so exp2 gives 0, not NaN.
      m_use[sel] = m_new == -INFINITY ? 0.0f : m_new;
      corr[sel] = fast_exp2(m[sel] - m_use[sel]);
      l[sel] *= corr[sel];
      m[sel] = m_new;
    }
#pragma unroll
    for (int i = 0; i < kN / 2; ++i) {
      const int sel = (i >> 1) & 1;
      const float pr = fast_exp2(s[i] - m_use[sel]);
      l[sel] += pr;  // this thread's part of the row sum; the 4 parts are added at the end
      s[i] = pr;
    }
#pragma unroll
    for (int n = 0; n < kN / 4; ++n) pf[n / 4][n % 4] = pack_bf16(s[2 * n], s[2 * n + 1]);
  }

  __device__ void run(int s_begin, int n_tiles, int h, __nv_bfloat16* __restrict__ out, float* __restrict__ lse) {
    constexpr int kKv = G::kKvStages;
    wait_q();
    float o[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) o[i] = 0.0f;
    uint32_t pf[kN / 16][4];
    float corr[2] = {1.0f, 1.0f};

    const TurnTaking turns{cons};
    turns.open();
    {
      float s[kN / 2];
      const uint32_t bias = acquire_bias(s_begin);
      mbar_wait_as<G::kTimedWaits>(sm.k_full(0), 0, kTagKFull);
      turns.wait_turn();
      issue_qk(s, 0);
      turns.pass_turn(false);
      wgmma_wait<0>();
      fence_regs(s);
      release(sm.k_empty(0));
      softmax(s, s_begin, bias, pf, corr);  // O is still zero: corr is not needed
    }
    for (int j = 1; j < n_tiles; ++j) {
      const int st = j % kKv, pst = (j - 1) % kKv;
      float s[kN / 2];  // a fresh accumulator per tile (the previous one is dead once P is packed)
      const uint32_t bias = acquire_bias(s_begin + j * kN);
      mbar_wait_as<G::kTimedWaits>(sm.k_full(st), (j / kKv) & 1, kTagKFull + st);
      mbar_wait_as<G::kTimedWaits>(sm.v_full(pst), ((j - 1) / kKv) & 1, kTagVFull + pst);
      turns.wait_turn();
      issue_qk(s, st);
      // While S(j) runs: bring O to the running max of tile j-1, then add P(j-1) V(j-1).
#pragma unroll
      for (int i = 0; i < 64; ++i) o[i] *= corr[(i >> 1) & 1];
      issue_pv(o, pf, pst);
      turns.pass_turn(false);
      wgmma_wait<1>();  // S(j) done; P(j-1) V(j-1) may still run
      fence_regs(s);
      release(sm.k_empty(st));
      uint32_t pf_next[kN / 16][4];
      softmax(s, s_begin + j * kN, bias, pf_next, corr);
      wgmma_wait<0>();
      fence_regs(o);
      fence_regs(pf);  // pf stays allocated until the product reading it is done
      release(sm.v_empty(pst));
#pragma unroll
      for (int n = 0; n < kN / 4; ++n) pf[n / 4][n % 4] = pf_next[n / 4][n % 4];
      fence_regs(pf);
      fence_regs(o);
    }
#pragma unroll
    for (int i = 0; i < 64; ++i) o[i] *= corr[(i >> 1) & 1];
    const int lst = (n_tiles - 1) % kKv;
    mbar_wait_as<G::kTimedWaits>(sm.v_full(lst), ((n_tiles - 1) / kKv) & 1, kTagVFull + lst);
    turns.wait_turn();
    issue_pv(o, pf, lst);
    turns.pass_turn(true);
    wgmma_wait<0>();
    fence_regs(o);
    fence_regs(pf);
    release(sm.v_empty(lst));

#pragma unroll
    for (int sel = 0; sel < 2; ++sel) {
      float sum = l[sel];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const int t = t_row[sel];
      if (t >= p.T) continue;
      const float inv = 1.0f / sum;  // sum >= 1 term: key s = t is always allowed
      __nv_bfloat16* o_t = out + (static_cast<int64_t>(t) * p.H + h) * kD;
#pragma unroll
      for (int q = 0; q < 16; ++q) {
        const int i = 4 * q + 2 * sel;
        *reinterpret_cast<__nv_bfloat162*>(o_t + 8 * q + 2 * cq) = __floats2bfloat162_rn(o[i] * inv, o[i + 1] * inv);
      }
      if (cq == 0) lse[static_cast<int64_t>(h) * p.T + t] = (m[sel] + log2f(sum)) * kLn2;
    }
  }
};

template <class G>
__global__ void __launch_bounds__(G::kThreads, 1)
    attention_wg_forward_kernel(const __grid_constant__ CUtensorMap q_map, const __grid_constant__ CUtensorMap k_map,
                                const __grid_constant__ CUtensorMap v_map, const __grid_constant__ CUtensorMap b_map,
                                const WgProblem p, __nv_bfloat16* __restrict__ out, float* __restrict__ lse) {
  extern __shared__ unsigned char smem_raw[];
  const Smem<G> sm{(smem_u32(smem_raw) + 1023u) & ~1023u};
  const int n_qtiles = (p.T + kBlockM - 1) / kBlockM;
  const int t0 = (n_qtiles - 1 - static_cast<int>(blockIdx.x)) * kBlockM;  // longest rows first
  const int h = blockIdx.y;
  const int kvh = h / (p.H / p.G);
  const int s_begin = first_key_tile<G::kN>(t0, p.window);
  const int n_tiles = key_tile_count<G::kN>(t0, p.T, p.window);
  const int wg = threadIdx.x / 128;
  Loader<G> load{sm, p, &q_map, &k_map, &v_map, &b_map, t0, h, kvh, s_begin, n_tiles};

  if (threadIdx.x == 0) {
    mbar_init(sm.q_full(), 1);
    for (int st = 0; st < G::kKvStages; ++st) {
      mbar_init(sm.k_full(st), 1);
      mbar_init(sm.k_empty(st), kConsumerWarps);
      mbar_init(sm.v_full(st), 1);
      mbar_init(sm.v_empty(st), kConsumerWarps);
    }
    for (int st = 0; st < G::kBiasStages; ++st)
      for (int cons = 0; cons < kConsumers; ++cons) {
        mbar_init(sm.b_full(cons, st), 1);
        mbar_init(sm.b_empty(cons, st), 4);
      }
    mbar_init_fence();
    tma_prefetch_descriptor(&q_map);
    tma_prefetch_descriptor(&k_map);
    tma_prefetch_descriptor(&v_map);
    if (p.has_bias) tma_prefetch_descriptor(&b_map);
  }
  __syncthreads();  // the last CTA-wide barrier: the producer's idle warps exit below

  if (wg == 0) {
    if constexpr (G::kProducerRegisters > 0) asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(G::kProducerRegisters));
    if (threadIdx.x == 0) load.produce();
    return;
  }
  if constexpr (G::kConsumerRegisters > 0) asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(G::kConsumerRegisters));
  Consumer<G> c(sm, p, wg - 1, t0, threadIdx.x % 128);
  c.run(s_begin, n_tiles, h, out, lse);
}

template <class G>
void launch_geometry(const LaunchArgs& a, cudaStream_t stream) {
  const void* kernel = reinterpret_cast<const void*>(&attention_wg_forward_kernel<G>);
  attn::set_smem("attention_forward_wgmma", kernel, G::kSmemBytes);
  const dim3 grid((a.p.T + kBlockM - 1) / kBlockM, a.p.H);
  attention_wg_forward_kernel<G><<<grid, G::kThreads, G::kSmemBytes, stream>>>(a.q_map, a.k_map, a.v_map, a.b_map, a.p,
                                                                               a.out, a.lse);
  QUILL_CUDA_CHECK_LAUNCH("attention_wg_forward_kernel");
}

}  // namespace

void launch_forward_kernel(const LaunchArgs& a, cudaStream_t stream, AttentionForwardForm form) {
  if (form == AttentionForwardForm::kWide)
    launch_geometry<FwdGeometryWide>(a, stream);
  else
    launch_geometry<FwdGeometry>(a, stream);
}

}  // namespace quill::cuda::attn_wg
