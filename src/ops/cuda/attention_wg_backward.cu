// Attention backward for head dim 128 on Hopper (sm_90a), FlashAttention-3 style: the five tile
// products as warpgroup MMAs (wgmma) from shared memory and registers, Q and dO streamed by TMA on
// mbarriers, two warpgroups of 64 keys each. Math: ops/attention.h and the comment of
// attention_backward.cu; the same outputs as the mma.sync backward (attention_tc_backward.cu): dk, dv
// written once from registers, dQ added in a fixed order into an fp32 accumulator (attention_dq.cuh),
// drb [T, H, E] stored per allowed pair and reduced by attn_tc::bias_rows_backward. Tiles, shared memory
// and schedule: attention_wg_bwd_layout.h; design: docs/decisions/attention-wgmma.md.
//
// CTA: one (128-key tile, query head), 256 threads: warpgroups 0 and 1 own 64 keys each (keys as the M
// rows of every product, so dK and dV accumulate in registers); thread 0 also issues every TMA, one step
// ahead (why no producer warp: attention_wg_bwd_layout.h). Under grouped queries (H > G) the head's dK and dV
// are fp32 partials, summed over the kv head's group by sum_head_partials_kernel (why one query head per CTA and
// not one kv head: ops/attention_head_split.h). Per step (64 queries from t0), warpgroup w:
//   S^T  = K_w Q^T              8 x wgmma.m64n64k16, both from shared memory (K-major)
//   dP^T = V_w dO^T             8 x wgmma.m64n64k16, both from shared memory (K-major)
//   P^T  = exp2(c_qk S^T + c_b bias - lse log2 e), masked; the bias staged from the bias rows (cp.async)
//   dV  += P^T dO               4 x wgmma.m64n128k16, P^T from registers, dO MN-major
//   dS^T = tau P^T (dP^T - D);  drb[t, h, t - s] = dS^T where t - s < E
//   dK  += dS^T Q               4 x wgmma.m64n128k16, dS^T from registers, Q MN-major
//   dS^T to shared memory; both warpgroups' halves complete (named barrier)
//   dQ[:, 64 w ..] = dS K       8 x wgmma.m64n64k16 over all 128 keys, dS and K MN-major
//   dQ staged in shared memory, added by one bulk reduction after the key tiles below this one
// The two warpgroups' products interleave on the tensor cores; within one, S^T and dP^T are issued
// together, the softmax of S^T runs while dP^T is computed, and dS^T while dV is.
// The producer form (an experiment, --attention-backward-form producer; ops/kernel_trials.h): a third warpgroup of
// 384 threads takes thread 0's duties, FlashAttention-3's way: one thread streams Q and dO, another adds the staged
// dQ blocks in their fixed order (waiting for its turn, reducing, passing the turn as soon as the reduction has
// landed), so no consumer waits on another CTA; the consumers take 240 registers by setmaxnreg (the producer 24) and
// wait without the trap (which keeps ptxas from honouring setmaxnreg: attention_wg_layout.h). The same additions in
// the same order: the same bits as the consumers' form.
#include <algorithm>

#include "ops/cuda/attention_dq.cuh"
#include "ops/cuda/attention_tc.cuh"
#include "ops/cuda/attention_tc.h"
#include "ops/cuda/attention_wg.cuh"
#include "ops/cuda/attention_wg.h"
#include "ops/cuda/attention_wg_bwd_layout.h"
#include "ops/cuda/attention_wg_internal.h"
#include "ops/attention_head_split.h"

namespace quill::cuda::attn_wg {
namespace {

using namespace bwd;
using namespace attn_dq;

constexpr float kLog2e = 1.4426950408889634f;
constexpr int kConsumerWarps = 4 * kConsumerWgs;
constexpr int kBarConsumers = 1;  // named barrier over both consumer warpgroups; 2 + w: warpgroup w alone

struct BwdArgs {
  CUtensorMap q_map, k_map, v_map, do_map;
  const float* rb;   // [T, H, E] bias rows, or null
  WgProblem p;
  const float* lse;  // [H, T]
  const float* D;    // [H, T]
  float* dq_acc;     // [H][2][t_pad][64] (attention_dq.cuh)
  int* dq_order;     // [H][t_pad / 64][2]: additions so far per (head, query tile, head-dim half)
  float* drb;        // [T, H, E] or null
  __nv_bfloat16* dk;
  __nv_bfloat16* dv;
  float* dk_part;  // H > G: [T, H, 128] fp32 dK and dV of each query head, summed after; else null
  float* dv_part;
  int unordered;  // additions in arrival order (attn_tc::arrival_order_dq: a noise floor, not reproducible)
};
static_assert(kKeys == attention_head_split::kKeysPerCta, "attention_head_split.h counts the backward's CTAs");

struct Smem {
  uint32_t base;
  __device__ uint32_t dq_full(int w) const { return bar(1 + 2 * bwd::kStages + w); }
  __device__ uint32_t dq_empty(int w) const { return bar(1 + 2 * bwd::kStages + kConsumerWgs + w); }
  __device__ uint32_t k(int w, int half) const { return base + bwd::kSmemK + (2 * w + half) * kBoxBytes; }
  __device__ uint32_t v(int w, int half) const { return base + bwd::kSmemV + (2 * w + half) * kBoxBytes; }
  __device__ uint32_t q(int st, int half) const { return base + bwd::kSmemQ + (2 * st + half) * kBoxBytes; }
  __device__ uint32_t dout(int st, int half) const { return base + kSmemDo + (2 * st + half) * kBoxBytes; }
  __device__ uint32_t bias(int w) const { return base + bwd::kSmemBias + w * kBiasWgBytes; }
  __device__ uint32_t ds(int w) const { return base + kSmemDs + w * kBoxBytes; }
  __device__ uint32_t dq_stage(int w) const { return base + kSmemDqStage + w * kDqStageBytes; }
  __device__ uint32_t rows(int w, int buf, int kind) const {
    return base + kSmemRows + ((w * 2 + buf) * kRowFloats + kind) * kQueries * 4;
  }
  __device__ uint32_t bar(int i) const { return base + bwd::kSmemBarriers + 8 * i; }
  __device__ uint32_t kv_full() const { return bar(0); }
  __device__ uint32_t q_full(int st) const { return bar(1 + st); }
  __device__ uint32_t q_empty(int st) const { return bar(1 + bwd::kStages + st); }
};
// Per-query rows (kSmemRows): lse, D and tau arrive raw in kinds 0-2 (tau not loaded without log scaling);
// the thread that loaded a query then turns lse into lse log2 e, sets tau to 1 where log scaling is off, and
// adds the two products of tau the scores need (finish_rows), so P costs two FMAs and an exp2 per score.
enum : int { kRowLse2 = 0, kRowD = 1, kRowTau = 2, kRowCoefQk = 3, kRowCoefBias = 4 };
// A descriptor moved by `bytes` (a multiple of 16): the start-address field is the low 14 bits of addr / 16,
// and every buffer here lies below 256 KiB, so the add never carries out of it.
// (sm_90's shared window is 228 KiB; the assert keeps a larger future layout from carrying into the LBO field.)
static_assert(bwd::kSmemBytes < (1 << 18), "desc_plus: shared addresses must stay below 256 KiB");
__device__ __forceinline__ uint64_t desc_plus(uint64_t desc, uint32_t bytes) { return desc + (bytes >> 4); }
__device__ __forceinline__ void st_shared_f32(uint32_t addr, float v) {
  asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(addr), "f"(v) : "memory");
}

__device__ __forceinline__ float ld_shared_f32(uint32_t addr) {
  float v;
  asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(v) : "r"(addr));
  return v;
}
__device__ __forceinline__ void st_shared_b32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}

// The producer form's registers (128 x 24 + 256 x 240 <= 65,536) and threads.
constexpr int kProducerRegisters = 24, kConsumerRegisters = 240;
constexpr int kProducerFormThreads = bwd::kThreads + 128;
static_assert(kProducerRegisters * 128 + kConsumerRegisters * bwd::kThreads <= 65536, "setmaxnreg: over the register file");

// The step order of a CTA (query head `head`): query tiles from the last down to the diagonal. Every key tile walks
// the query tiles in the same order, so a CTA reaches each query tile one step after the key tile below it, which
// adds into that dQ block first: the ordered additions wait about one step.
struct Schedule {
  int s0, head, kvh, n_qt, n_steps;
  __device__ Schedule(const WgProblem& p, int kt, int head_) : s0(kt * kKeys), head(head_) {
    kvh = head / (p.H / p.G);
    n_qt = query_tile_count(s0, p.T, p.window);
    n_steps = n_qt;
  }
  __device__ int t0(int it) const { return first_query(s0) + (n_qt - 1 - it) * kQueries; }
};

// The loads, issued by thread 0 (the producer form: K, V and the first Q and dO by thread 0, the rest by the
// producer's first thread): K and V once; per step Q and dO into stage it % kStages (after both warpgroups released
// the step that used it before).
template <bool kProducer>
struct Loader {
  const Smem& sm;
  const BwdArgs& a;
  const Schedule& sc;

  __device__ void keys_and_values() const {
    mbar_arrive_expect_tx(sm.kv_full(), 8 * kBoxBytes);
#pragma unroll
    for (int w = 0; w < kConsumerWgs; ++w)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        tma_load_3d(sm.k(w, half), &a.k_map, sm.kv_full(), half * kHalfCols, sc.kvh, sc.s0 + kWgKeys * w);
        tma_load_3d(sm.v(w, half), &a.v_map, sm.kv_full(), half * kHalfCols, sc.kvh, sc.s0 + kWgKeys * w);
      }
  }
  __device__ void queries(int it) const {
    if (it >= sc.n_steps) return;
    const int h = sc.head, t0 = sc.t0(it), st = it % bwd::kStages;
    mbar_wait_as<!kProducer>(sm.q_empty(st), ((it / bwd::kStages) & 1) ^ 1, 0);
    mbar_arrive_expect_tx(sm.q_full(st), 4 * kBoxBytes);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      tma_load_3d(sm.q(st, half), &a.q_map, sm.q_full(st), half * kHalfCols, h, t0);
      tma_load_3d(sm.dout(st, half), &a.do_map, sm.q_full(st), half * kHalfCols, h, t0);
    }
  }
};

template <bool kProducer>
struct Consumer {
  Smem sm;
  const BwdArgs& a;
  const Schedule& sc;
  const Loader<kProducer>& load;  // used by thread 0 of warpgroup 0 only (the consumers' form)
  float* bias_rows;  // this warpgroup's staged bias (generic pointer, for attn_tc::load_bias_tile_async)
  int w, tid, lane, warp, g, c, sw;
  bool loader;

  __device__ Consumer(const Smem& sm_, unsigned char* smem_base, const BwdArgs& a_, const Schedule& sc_,
                      const Loader<kProducer>& load_, int w_, int tid_)
      : sm(sm_), a(a_), sc(sc_), load(load_), w(w_), tid(tid_) {
    bias_rows = reinterpret_cast<float*>(smem_base + bwd::kSmemBias + w * kBiasWgBytes);
    loader = !kProducer && w == 0 && tid == 0;
    lane = tid & 31;
    warp = tid >> 5;
    g = lane >> 2;
    c = lane & 3;
    sw = sc.s0 + kWgKeys * w;
  }

  // The per-query lse, D and tau of step it into shared-memory buffer buf (threads 0-63 of the warpgroup,
  // one query each; cp.async, so nothing waits in registers): complete after cp_async_wait_all() and the
  // next warpgroup barrier. Zero past T (those queries are masked).
  __device__ void load_rows(int it, int buf) const {
    if (tid >= kQueries || it >= sc.n_steps) return;
    const int h = sc.head, t = sc.t0(it) + tid;
    const bool in = t < a.p.T;
    const int64_t ht = static_cast<int64_t>(h) * a.p.T + t;
    const float* src[3] = {a.lse + ht, a.D + ht, a.p.tau != nullptr ? a.p.tau + t : a.lse + ht};
    const bool copy[3] = {in, in, in && a.p.tau != nullptr};
#pragma unroll
    for (int k = 0; k < 3; ++k)
      asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(sm.rows(w, buf, k) + 4 * tid),
                   "l"(copy[k] ? src[k] : a.lse), "r"(copy[k] ? 4 : 0)
                   : "memory");
    asm volatile("cp.async.commit_group;\n" ::: "memory");
  }
  // This thread's cp.async copies (rows, bias) have landed, and the rows of step it (buffer buf) are
  // finished; visible to the warpgroup after its next barrier.
  __device__ void copies_landed(int it, int buf) const {
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    if (tid >= kQueries || it >= sc.n_steps) return;
    const uint32_t at = 4 * tid;
    const float lse = ld_shared_f32(sm.rows(w, buf, kRowLse2) + at);
    const float tau = a.p.tau != nullptr ? ld_shared_f32(sm.rows(w, buf, kRowTau) + at) : 1.0f;
    st_shared_f32(sm.rows(w, buf, kRowLse2) + at, lse * kLog2e);
    st_shared_f32(sm.rows(w, buf, kRowTau) + at, tau);
    st_shared_f32(sm.rows(w, buf, kRowCoefQk) + at, tau * a.p.scale * kLog2e);
    st_shared_f32(sm.rows(w, buf, kRowCoefBias) + at, tau * kLog2e);
  }
  __device__ bool has_bias(int it) const {
    return it < sc.n_steps && a.p.has_bias && step_has_bias(sc.t0(it), sw, a.p.E);
  }
  // The bias of step it's queries by this warpgroup's keys (all 128 threads; zero outside the band or T).
  __device__ void load_bias(int it) const {
    if (!has_bias(it)) return;
    const attn_tc::TcProblem tp{a.p.T, a.p.H, a.p.G, a.p.E, a.p.window, a.p.scale, a.rb, a.p.tau};
    attn_tc::load_bias_tile_async(bias_rows, tp, sc.head, sc.t0(it), sw, tid, 128);
    attn_tc::cp_async_commit();
  }

  // acc (64 keys x 64 queries) = A_w (keys x head dim) . B^T (queries x head dim), both K-major.
  __device__ void issue_keys_by_queries(float (&acc)[32], uint32_t a_box0, uint32_t b_box0) const {
    const uint64_t da = k_major_desc(a_box0), db = k_major_desc(b_box0);
    fence_regs(acc);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 8; ++kk) {
      const uint32_t off = (kk / 4) * kBoxBytes + (kk % 4) * 32;
      wgmma_m64n64k16_ss(acc, desc_plus(da, off), desc_plus(db, off), kk > 0 ? 1 : 0);
    }
    wgmma_commit();
    fence_regs(acc);
  }
  // acc (64 keys x 128 head dims) += A (64 keys x 64 queries, registers) . rows (64 queries x 128, MN-major).
  __device__ void issue_acc_rows(float (&acc)[64], const uint32_t (&af)[4][4], uint32_t rows_box0) const {
    const uint64_t db = mn_major_desc(rows_box0);
    fence_regs(acc);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) wgmma_m64n128k16_rs_tb(acc, af[kk], desc_plus(db, kk * 16 * kRowBytes), 1);
    wgmma_commit();
    fence_regs(acc);
  }
  // dq (64 queries x head dims 64 w ..) = dS (all 128 keys, MN-major) . K (keys x those head dims, MN-major).
  __device__ void issue_dq(float (&dq)[32]) const {
    const uint64_t da = mn_major_desc(sm.ds(0)), db = mn_major_desc(sm.k(0, w));
    fence_regs(dq);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 8; ++kk) {
      // Keys 16 kk ..: rows 16 (kk % 4) of dS box kk / 4 and of K box (kk / 4, w), 2 KiB per 16 rows.
      wgmma_m64n64k16_ss<1, 1>(dq, desc_plus(da, (kk / 4) * kBoxBytes + (kk % 4) * 16 * kRowBytes),
                            desc_plus(db, (kk / 4) * 2 * kBoxBytes + (kk % 4) * 16 * kRowBytes), kk > 0 ? 1 : 0);
    }
    wgmma_commit();
    fence_regs(dq);
  }
  __device__ void release(uint32_t bar) const {
    __syncwarp();
    if (lane == 0) mbar_arrive(bar);
  }

  __device__ void run() {
    float dk[64], dv[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) dk[i] = dv[i] = 0.0f;
    int* pending = nullptr;  // thread 0: the counter to advance once the last reduction has landed
    const int64_t t_pad = (a.p.T + kQueries - 1) / kQueries * kQueries;
    load_rows(0, 0);
    load_bias(0);
    copies_landed(0, 0);
    named_barrier(2 + w, 128);
    mbar_wait_as<!kProducer>(sm.kv_full(), 0, 2);

    for (int it = 0; it < sc.n_steps; ++it) {
      // Every shared-memory address and fragment coordinate below derives from these; making them opaque
      // per step stops the compiler from hoisting ~50 loop-invariant addresses and descriptors into
      // registers for the whole loop (with them the consumer spilled; ptxas -v).
      asm volatile("" : "+r"(sm.base), "+r"(g), "+r"(c), "+r"(warp));
      const int h = sc.head, t0 = sc.t0(it), st = it % bwd::kStages, buf = it & 1;
      if (loader) load.queries(it + 1);
      load_rows(it + 1, buf ^ 1);  // lands during this step's products
      const bool has_bias = this->has_bias(it);
      const bool full = pair_fully_allowed(t0, sw, a.p.T, a.p.window);
      mbar_wait_as<!kProducer>(sm.q_full(st), (it / bwd::kStages) & 1, 4);

      float s[32], dp[32];
      issue_keys_by_queries(s, sm.k(w, 0), sm.q(st, 0));
      issue_keys_by_queries(dp, sm.v(w, 0), sm.dout(st, 0));
      wgmma_wait<1>();
      fence_regs(s);

      // P^T. Element i of an m64n64 accumulator: key row 16 warp + g + 8 ((i / 2) % 2), query column
      // 8 (i / 4) + 2 c + (i % 2). (Loops over pairs q = i / 2 with the bias load inside: ordered by columns
      // first, ptxas kept the 32 bias addresses live and spilled.)
      const uint32_t rows = sm.rows(w, buf, 0) + 4 * 2 * c;  // + kind * 256 + 32 (q / 2)
#pragma unroll
      for (int q = 0; q < 16; ++q) {
        const int sel = q & 1, col = 8 * (q >> 1) + 2 * c;  // query row of the tile
        const int kr = 16 * warp + g + 8 * sel;             // key row in this warpgroup
        // x = log2 e (tau (scale S + bias) - lse): the exponent of P in base 2.
        const float2 cqk = ld_shared_f2(rows + kRowCoefQk * 256 + 32 * (q >> 1));
        const float2 lse2 = ld_shared_f2(rows + kRowLse2 * 256 + 32 * (q >> 1));
        float o0 = -lse2.x, o1 = -lse2.y;
        if (has_bias) {
          const float2 cb = ld_shared_f2(rows + kRowCoefBias * 256 + 32 * (q >> 1));
          o0 = fmaf(cb.x, ld_shared_f32(sm.bias(w) + 4 * attn_tc::bias_at(col, kr)), o0);
          o1 = fmaf(cb.y, ld_shared_f32(sm.bias(w) + 4 * attn_tc::bias_at(col + 1, kr)), o1);
        }
        float p0 = fast_exp2(fmaf(cqk.x, s[2 * q], o0)), p1 = fast_exp2(fmaf(cqk.y, s[2 * q + 1], o1));
        if (!full) {
          const int sk = sw + kr, t = t0 + col;
          const bool ok0 = (t < a.p.T) & (sk <= t) & ((a.p.window == 0) | (t - sk < a.p.window));
          const bool ok1 = (t + 1 < a.p.T) & (sk <= t + 1) & ((a.p.window == 0) | (t + 1 - sk < a.p.window));
          p0 = ok0 ? p0 : 0.0f;
          p1 = ok1 ? p1 : 0.0f;
        }
        s[2 * q] = p0;
        s[2 * q + 1] = p1;
      }
      uint32_t pf[4][4];
#pragma unroll
      for (int n = 0; n < 16; ++n) pf[n / 4][n % 4] = pack_bf16(s[2 * n], s[2 * n + 1]);
      issue_acc_rows(dv, pf, sm.dout(st, 0));
      // dP^T only: dV stays in flight on the tensor cores while dS^T is computed below (FlashAttention-3's order;
      // waiting for dV here left the tensor cores idle through the dS arithmetic). pf and dv are not touched until
      // the step's last wait.
      wgmma_wait<1>();
      fence_regs(dp);

      // dS^T = tau P^T (dP^T - D); its bias-row gradient drb[(t H + h) E + t - s], t = t0 + 8 jj + 2 c + e,
      // s = sw + kr: per row sel a base plus (8 jj + e) (H E + 1).
      const int64_t drb_step = static_cast<int64_t>(a.p.H) * a.p.E + 1;
#pragma unroll
      for (int jj = 0; jj < 8; ++jj) {
        const float2 tau = ld_shared_f2(rows + kRowTau * 256 + 32 * jj);
        const float2 dd = ld_shared_f2(rows + kRowD * 256 + 32 * jj);
#pragma unroll
        for (int sel = 0; sel < 2; ++sel)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int i = 4 * jj + 2 * sel + e;
            dp[i] = (e ? tau.y : tau.x) * s[i] * (dp[i] - (e ? dd.y : dd.x));
            if (has_bias && a.drb != nullptr) {
              const int sk = sw + 16 * warp + g + 8 * sel, t = t0 + 8 * jj + 2 * c + e, u = t - sk;
              // Allowed pairs closer than E own a slot (P = 0 elsewhere, so the mask's conditions suffice).
              if (t < a.p.T && u >= 0 && u < a.p.E && (a.p.window == 0 || u < a.p.window))
                a.drb[(static_cast<int64_t>(t0 + 2 * c) * drb_step + static_cast<int64_t>(h) * a.p.E - sk) +
                      (8 * jj + e) * drb_step] = dp[i];
            }
          }
      }
      uint32_t df[4][4];
#pragma unroll
      for (int n = 0; n < 16; ++n) df[n / 4][n % 4] = pack_bf16(dp[2 * n], dp[2 * n + 1]);
      issue_acc_rows(dk, df, sm.q(st, 0));

      // dS^T into shared memory for dQ: key row r, queries along the row (128-byte swizzle). The other
      // warpgroup's dQ of the previous step has finished reading it (it waited before reaching here).
      named_barrier(kBarConsumers, 256);
      load_bias(it + 1);  // both warpgroups are past this step's bias
      // Pair n = 2 jj + sel is row r = 16 warp + g + 8 sel (r % 8 = g), columns 8 jj + 2 c: swizzle128(r, 2 col)
      // = (r * 128 + 4 c + 16 g) ^ 16 jj (the row base has bits 4-6 free; checked against swizzle128).
#pragma unroll
      for (int sel = 0; sel < 2; ++sel) {
        const uint32_t row_at = (sm.ds(w) + (16 * warp + g + 8 * sel) * kRowBytes + 4 * c) | (g << 4);
#pragma unroll
        for (int jj = 0; jj < 8; ++jj) st_shared_b32(row_at ^ (jj << 4), df[jj / 2][2 * (jj % 2) + sel]);
      }
      fence_proxy_async_smem();
      named_barrier(kBarConsumers, 256);
      float dq[32];
      issue_dq(dq);
      wgmma_wait<0>();  // dV, dK and dQ
      fence_regs(dv);
      fence_regs(pf);
      fence_regs(dk);
      fence_regs(dq);
      fence_regs(df);
      release(sm.q_empty(st));

      // dQ: the previous reduction has landed (its counter advanced), the staging block is free (the producer
      // form: its dQ writer has read the block).
      if (!kProducer && tid == 0 && pending != nullptr) release_turn(pending);
      copies_landed(it + 1, buf ^ 1);  // the next step's rows and bias
      named_barrier(2 + w, 128);
      if constexpr (kProducer)
        if (it > 0) mbar_wait_untimed(sm.dq_empty(w), (it - 1) & 1);
      const uint32_t stage = sm.dq_stage(w);
      // attention_dq.cuh's unit permutation: pair (jj, sel) of row r = 16 warp + g + 8 sel, column 8 jj + 2 c, at
      // float r * 64 + 4 ((2 jj + c / 2) ^ g) + 2 (c % 2) = one XOR with 32 jj of a per-row base (checked against
      // dq_unit_col).
#pragma unroll
      for (int sel = 0; sel < 2; ++sel) {
        const int r = 16 * warp + g + 8 * sel;
        const uint32_t row_at = stage + r * 256 + 8 * (c & 1) + ((((c >> 1) ^ g) & 1) << 4) + ((g & 6) << 4);
#pragma unroll
        for (int jj = 0; jj < 8; ++jj) st_shared_f2(row_at ^ (jj << 5), dq[4 * jj + 2 * sel], dq[4 * jj + 2 * sel + 1]);
      }
      fence_proxy_async_smem();
      named_barrier(2 + w, 128);
      if (kProducer && tid == 0) mbar_arrive(sm.dq_full(w));  // to the dQ writer (DqWriter)
      if (!kProducer && tid == 0) {
        const int qt = t0 / kQueries;
        int* order = a.dq_order + ((static_cast<int64_t>(h) * (t_pad / kQueries) + qt) * 2 + w);
        const int before = additions_before(sc.s0 / kKeys, t0, a.p.window);
        while (!a.unordered && load_acquire(order) != before) {
        }
        fence_proxy_async_global();
        float* dst = a.dq_acc + ((static_cast<int64_t>(h) * 2 + w) * t_pad + t0) * 64;
        asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(dst),
                       "r"(stage), "r"(kDqStageBytes)
                       : "memory");
        bulk_commit();
        pending = order;
      }
    }
    if (!kProducer && tid == 0 && pending != nullptr) release_turn(pending);

    // dk = scale * dK, dv = dV, bf16. Element i: key row 16 warp + g + 8 ((i / 2) % 2), column 8 (i / 4) + 2 c + (i % 2).
    // Grouped queries: this head's dK and dV as fp32 partials, summed and scaled by sum_head_partials_kernel.
    if (a.dk_part != nullptr) {
#pragma unroll
      for (int sel = 0; sel < 2; ++sel) {
        const int sk = sw + 16 * warp + g + 8 * sel;
        if (sk >= a.p.T) continue;
        const int64_t at = (static_cast<int64_t>(sk) * a.p.H + sc.head) * kD + 2 * c;
#pragma unroll
        for (int q = 0; q < 16; ++q) {
          const int i = 4 * q + 2 * sel;
          *reinterpret_cast<float2*>(a.dk_part + at + 8 * q) = make_float2(dk[i], dk[i + 1]);
          *reinterpret_cast<float2*>(a.dv_part + at + 8 * q) = make_float2(dv[i], dv[i + 1]);
        }
      }
      return;
    }
#pragma unroll
    for (int sel = 0; sel < 2; ++sel) {
      const int sk = sw + 16 * warp + g + 8 * sel;
      if (sk >= a.p.T) continue;
      __nv_bfloat16* dk_s = a.dk + (static_cast<int64_t>(sk) * a.p.G + sc.kvh) * kD;
      __nv_bfloat16* dv_s = a.dv + (static_cast<int64_t>(sk) * a.p.G + sc.kvh) * kD;
#pragma unroll
      for (int q = 0; q < 16; ++q) {
        const int i = 4 * q + 2 * sel;
        *reinterpret_cast<__nv_bfloat162*>(dk_s + 8 * q + 2 * c) =
            __floats2bfloat162_rn(a.p.scale * dk[i], a.p.scale * dk[i + 1]);
        *reinterpret_cast<__nv_bfloat162*>(dv_s + 8 * q + 2 * c) = __floats2bfloat162_rn(dv[i], dv[i + 1]);
      }
    }
  }
};

// The producer form's dQ writer (one thread): per step and warpgroup, once the warpgroup has staged its block
// (dq_full), waits for the block's turn (the key tiles below this one have added), adds it by one bulk reduction,
// frees the staging once the reduction has read it (dq_empty), and passes the turn once it has landed.
struct DqWriter {
  const Smem& sm;
  const BwdArgs& a;
  const Schedule& sc;

  __device__ void run() const {
    const int64_t t_pad = (a.p.T + kQueries - 1) / kQueries * kQueries;
    for (int it = 0; it < sc.n_steps; ++it) {
      const int t0 = sc.t0(it), qt = t0 / kQueries;
      const int before = additions_before(sc.s0 / kKeys, t0, a.p.window);
#pragma unroll 1
      for (int w = 0; w < kConsumerWgs; ++w) {
        mbar_wait_untimed(sm.dq_full(w), it & 1);
        int* order = a.dq_order + ((static_cast<int64_t>(sc.head) * (t_pad / kQueries) + qt) * 2 + w);
        while (!a.unordered && load_acquire(order) != before) {
        }
        fence_proxy_async_global();
        float* dst = a.dq_acc + ((static_cast<int64_t>(sc.head) * 2 + w) * t_pad + t0) * 64;
        asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(dst),
                     "r"(sm.dq_stage(w)), "r"(kDqStageBytes)
                     : "memory");
        bulk_commit();
        bulk_wait_read();
        mbar_arrive(sm.dq_empty(w));
        int* turn = order;
        release_turn(turn);  // the reduction has landed: the next key tile may add
      }
    }
  }
};

template <bool kProducer>
__global__ void __launch_bounds__(kProducer ? kProducerFormThreads : bwd::kThreads, 1)
    attention_wg_backward_kernel(const __grid_constant__ BwdArgs a) {
  extern __shared__ unsigned char smem_raw[];
  const Smem sm{(smem_u32(smem_raw) + 1023u) & ~1023u};
  // Lowest key tile first (the CTAs with the most steps); query heads fastest. The ordered dQ additions go lowest
  // key tile first too, so a CTA only ever waits for CTAs launched before it.
  const Schedule sc(a.p, static_cast<int>(blockIdx.y), static_cast<int>(blockIdx.x));
  const Loader<kProducer> load{sm, a, sc};
  if (threadIdx.x == 0) {
    mbar_init(sm.kv_full(), 1);
    for (int st = 0; st < bwd::kStages; ++st) {
      mbar_init(sm.q_full(st), 1);
      mbar_init(sm.q_empty(st), kConsumerWarps);
    }
    for (int w = 0; w < kConsumerWgs; ++w) {
      mbar_init(sm.dq_full(w), 1);
      mbar_init(sm.dq_empty(w), 1);
    }
    mbar_init_fence();
    tma_prefetch_descriptor(&a.q_map);
    tma_prefetch_descriptor(&a.k_map);
    tma_prefetch_descriptor(&a.v_map);
    tma_prefetch_descriptor(&a.do_map);
    load.keys_and_values();
    load.queries(0);
  }
  __syncthreads();
  if constexpr (kProducer) {
    if (threadIdx.x >= bwd::kThreads) {  // the producer warpgroup: warp 0 loads, warp 1 writes dQ, the rest exit
      asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kProducerRegisters));
      const int pw = (static_cast<int>(threadIdx.x) - bwd::kThreads) / 32, lane = static_cast<int>(threadIdx.x) % 32;
      if (pw == 0 && lane == 0)
        for (int it = 1; it < sc.n_steps; ++it) load.queries(it);
      else if (pw == 1 && lane == 0)
        DqWriter{sm, a, sc}.run();
      return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kConsumerRegisters));
  }
  Consumer<kProducer> cons(sm, smem_raw + (sm.base - smem_u32(smem_raw)), a, sc, load, static_cast<int>(threadIdx.x) / 128,
                           static_cast<int>(threadIdx.x) % 128);
  cons.run();
}

// dk[t, g] = scale * sum over the group's query heads h (ascending) of dk_part[t, h], dv likewise without the
// scale; fp32 sums, one bf16 rounding. Thread i: four head dims of one (t, g).
__global__ void sum_head_partials_kernel(const float* __restrict__ dk_part, const float* __restrict__ dv_part,
                                         int64_t TG, int heads_per_kv, float scale, __nv_bfloat16* __restrict__ dk,
                                         __nv_bfloat16* __restrict__ dv) {
  const int64_t n = TG * (kD / 4);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t tg = i / (kD / 4), col = 4 * (i % (kD / 4));
    const int64_t from = tg * heads_per_kv * kD + col;  // (t, g) -> query heads g hpk .. in [T, H, 128]
    float4 sk = *reinterpret_cast<const float4*>(dk_part + from);
    float4 sv = *reinterpret_cast<const float4*>(dv_part + from);
    for (int h = 1; h < heads_per_kv; ++h) {
      const float4 k4 = *reinterpret_cast<const float4*>(dk_part + from + h * kD);
      const float4 v4 = *reinterpret_cast<const float4*>(dv_part + from + h * kD);
      sk.x += k4.x, sk.y += k4.y, sk.z += k4.z, sk.w += k4.w;
      sv.x += v4.x, sv.y += v4.y, sv.z += v4.z, sv.w += v4.w;
    }
    __nv_bfloat162* k_out = reinterpret_cast<__nv_bfloat162*>(dk + tg * kD + col);
    __nv_bfloat162* v_out = reinterpret_cast<__nv_bfloat162*>(dv + tg * kD + col);
    k_out[0] = __floats2bfloat162_rn(scale * sk.x, scale * sk.y);
    k_out[1] = __floats2bfloat162_rn(scale * sk.z, scale * sk.w);
    v_out[0] = __floats2bfloat162_rn(sv.x, sv.y);
    v_out[1] = __floats2bfloat162_rn(sv.z, sv.w);
  }
}

}  // namespace

void backward(const DeviceContext& ctx, const attn::Problem& p, const Tensor& q_THd, const Tensor& k_TGd,
              const Tensor& v_TGd, const Tensor& r_THR, const Tensor& table_RE, const Tensor& lse_HT, const Tensor& D_HT,
              const Tensor& dout_THd, const Tensor& dq_THd, const Tensor& dk_TGd, const Tensor& dv_TGd,
              const Tensor& dr_THR, const Tensor& dtable_RE, const Options& options) {
  const char* op = "attention_backward_wgmma";
  QUILL_CHECK(p.d == kD, "{}: head dim {} is not supported (this path is for head dim {} only)", op, p.d, kD);
  QUILL_CHECK(device_supported(), "{}: needs a compute capability 9.0 GPU (sm_90a: wgmma, TMA)", op);
  if (p.T == 0 || p.H == 0) return;
  const cudaStream_t stream = stream_of(ctx);
  BwdArgs a{};
  a.p = WgProblem{static_cast<int>(p.T), static_cast<int>(p.H), static_cast<int>(p.G), static_cast<int>(p.E),
                  static_cast<int>(p.window), p.scale, nullptr, 0};
  a.q_map = rows_map("q_THd", q_THd.data(), p.T, p.H);
  a.do_map = rows_map("dout_THd", dout_THd.data(), p.T, p.H);
  a.k_map = rows_map("k_TGd", k_TGd.data(), p.T, p.G);
  a.v_map = rows_map("v_TGd", v_TGd.data(), p.T, p.G);
  Tensor rb, drb, tau;
  if (p.R > 0 && p.E > 0) {
    rb = Tensor::empty({p.T, p.H, p.E}, DType::F32, *ctx.allocator);
    attn_tc::bias_rows(ctx, p, r_THR, table_RE, rb, attn_tc::bias_rows_path(ctx));
    a.rb = rb.data_as<float>();
    a.p.has_bias = 1;
    drb = attn_tc::zeroed_bias_grad(ctx, p);
    a.drb = drb.data_as<float>();
  } else if (p.R > 0) {
    QUILL_CUDA_CHECK(cudaMemsetAsync(dr_THR.data(), 0, dr_THR.nbytes(), stream));
  }
  if (p.log_scaling) {
    tau = Tensor::empty({p.T}, DType::F32, *ctx.allocator);
    attn_tc::tau_rows(ctx, p, tau);
    a.p.tau = tau.data_as<float>();
  }
  const int64_t t_pad = (p.T + kQueries - 1) / kQueries * kQueries;
  Tensor dq_acc = Tensor::empty({p.H, 2, t_pad, kD / 2}, DType::F32, *ctx.allocator);
  QUILL_CUDA_CHECK(cudaMemsetAsync(dq_acc.data(), 0, dq_acc.nbytes(), stream));
  Tensor dq_order = Tensor::empty({p.H, t_pad / kQueries, 2}, DType::I32, *ctx.allocator);
  QUILL_CUDA_CHECK(cudaMemsetAsync(dq_order.data(), 0, dq_order.nbytes(), stream));
  a.lse = lse_HT.data_as<float>();
  a.D = D_HT.data_as<float>();
  a.dq_acc = dq_acc.data_as<float>();
  a.dq_order = dq_order.data_as<int>();
  a.dk = dk_TGd.data_as<__nv_bfloat16>();
  a.dv = dv_TGd.data_as<__nv_bfloat16>();
  a.unordered = attn_tc::arrival_order_dq(ctx) ? 1 : 0;
  const bool split = attention_head_split::per_query_head(p.H, p.G);
  Tensor dk_part, dv_part;
  if (split) {
    dk_part = Tensor::empty({p.T, p.H, kD}, DType::F32, *ctx.allocator);
    dv_part = Tensor::empty({p.T, p.H, kD}, DType::F32, *ctx.allocator);
    a.dk_part = dk_part.data_as<float>();
    a.dv_part = dv_part.data_as<float>();
  }

  const dim3 grid(static_cast<unsigned>(p.H), static_cast<unsigned>((p.T + kKeys - 1) / kKeys));
  if (options.backward_form == AttentionBackwardForm::kProducer) {
    const void* kernel = reinterpret_cast<const void*>(&attention_wg_backward_kernel<true>);
    attn::set_smem(op, kernel, bwd::kSmemBytes);
    attention_wg_backward_kernel<true><<<grid, kProducerFormThreads, bwd::kSmemBytes, stream>>>(a);
  } else {
    const void* kernel = reinterpret_cast<const void*>(&attention_wg_backward_kernel<false>);
    attn::set_smem(op, kernel, bwd::kSmemBytes);
    attention_wg_backward_kernel<false><<<grid, bwd::kThreads, bwd::kSmemBytes, stream>>>(a);
  }
  QUILL_CUDA_CHECK_LAUNCH("attention_wg_backward_kernel");
  if (options.sync_check) {
    const cudaError_t err = cudaStreamSynchronize(stream);
    QUILL_CHECK(err == cudaSuccess, "{}: the kernel failed: {}", op, cudaGetErrorString(err));
  }
  if (split) {
    const int64_t TG = p.T * p.G, threads = 256, items = TG * (kD / 4);
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((items + threads - 1) / threads, 8192));
    sum_head_partials_kernel<<<blocks, threads, 0, stream>>>(a.dk_part, a.dv_part, TG, static_cast<int>(p.H / p.G),
                                                             p.scale, a.dk, a.dv);
    QUILL_CUDA_CHECK_LAUNCH("sum_head_partials_kernel");
  }
  attn_tc::finish_dq(ctx, p, dq_acc, dq_THd);
  if (a.p.has_bias)
    attn_tc::bias_rows_backward(ctx, p, r_THR, table_RE, drb, dr_THR, dtable_RE, attn_tc::bias_rows_path(ctx));
}

void attention_backward_wgmma(const DeviceContext& ctx, const Tensor& q_THd, const Tensor& k_TGd, const Tensor& v_TGd,
                              const Tensor& r_THR, const Tensor& table_RE, const ops::AttentionParams& params,
                              const Tensor& out_THd, const Tensor& lse_HT, const Tensor& dout_THd, const Tensor& dq_THd,
                              const Tensor& dk_TGd, const Tensor& dv_TGd, const Tensor& dr_THR, const Tensor& dtable_RE,
                              const Options& options) {
  const attn::Problem p = attn::check_backward("attention_backward_wgmma", q_THd, k_TGd, v_TGd, r_THR, table_RE, params,
                                               out_THd, lse_HT, dout_THd, dq_THd, dk_TGd, dv_TGd, dr_THR, dtable_RE);
  if (p.T == 0 || p.H == 0) return;
  const Tensor D = attn::output_gradient_dots(ctx, p, dout_THd, out_THd);
  backward(ctx, p, q_THd, k_TGd, v_TGd, r_THR, table_RE, lse_HT, D, dout_THd, dq_THd, dk_TGd, dv_TGd, dr_THR, dtable_RE,
           options);
}

}  // namespace quill::cuda::attn_wg
