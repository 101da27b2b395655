// Tensor-core building blocks of the head-dim-128 attention kernels (attention_tc_forward.cu,
// attention_tc_backward.cu): bf16 mma.sync m16n8k16 with fp32 accumulators, ldmatrix from swizzled
// shared-memory tiles, cp.async tile loads, and the host-side bias-row helpers' declarations.
//
// Fragment layouts (PTX ISA, "Matrix fragments for mma.m16n8k16", bf16): lane = 4 * g + c
// (g = lane / 4 in 0..7, c = lane % 4).
//   A 16x16 (row-major), 4 regs of 2 bf16: a0 (row g, cols 2c, 2c+1), a1 (row g+8, same cols),
//                                          a2 (row g, cols 2c+8, 2c+9), a3 (row g+8, cols 2c+8, 2c+9)
//   B 16x8 (k x n),      2 regs:           b0 (k 2c, 2c+1; col g), b1 (k 2c+8, 2c+9; col g)
//   C 16x8 fp32,         4 regs:           c0, c1 (row g, cols 2c, 2c+1), c2, c3 (row g+8, same cols)
// An accumulator pair (n-blocks 2j, 2j+1) of one 16-row strip is, once rounded to bf16, exactly the
// A fragment of k-step j of the next product: that is how P (or dz) feeds P.V (or dz.K) without a
// trip through shared memory.
//
// Shared-memory tiles: 64 rows of 128 bf16 (256 bytes = 16 chunks of 16 bytes). Chunk c of row r is
// stored at chunk position c ^ (r % 8), so the 8 row addresses of one ldmatrix 8x8 matrix fall in 8
// different 16-byte bank groups (no conflicts), and cp.async writes whole chunks.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace quill::cuda::attn_tc {

constexpr int kD = 128;         // head dim of these kernels
constexpr int kRows = 64;       // rows of every staged tile (queries or keys)
constexpr int kChunks = kD / 8; // 16-byte chunks per row
constexpr int kTileElems = kRows * kD;

__device__ __forceinline__ int swz(int row, int chunk) { return row * kD + ((chunk ^ (row & 7)) << 3); }

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Copies rows row0 .. row0+63 (row r at src + r * row_stride elements, 128 bf16 each) into a swizzled
// tile; rows at or past `n_rows` are zero-filled (cp.async with source size 0). All threads of the
// CTA take part (`n_threads` of them, a multiple of 16). Thread tid copies chunk tid % 16 of rows
// tid / 16, + n_threads / 16, ...: its swizzled chunk is the same in every row it copies (the row step
// is a multiple of 8), and its source pointer advances by a constant, so the loop is a few adds per
// copy (ncu, bench/results/2026-11-30-attention-v5: the former idx / 16 form spent ~25 integer
// instructions per 16-byte copy).
__device__ __forceinline__ void load_tile_async(__nv_bfloat16* tile, const __nv_bfloat16* __restrict__ src, int row0,
                                                int n_rows, int64_t row_stride, int tid, int n_threads) {
  const int c = tid & (kChunks - 1), r_first = tid / kChunks, r_step = n_threads / kChunks;
  const __nv_bfloat16* g = src + static_cast<int64_t>(row0 + r_first) * row_stride + c * 8;
  const int64_t g_step = static_cast<int64_t>(r_step) * row_stride;
  uint32_t s = smem_addr(tile + swz(r_first, c));
  const uint32_t s_step = static_cast<uint32_t>(r_step * kD * sizeof(__nv_bfloat16));
  for (int r = r_first; r < kRows; r += r_step, g += g_step, s += s_step) {
    const bool in = row0 + r < n_rows;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(in ? g : src), "r"(in ? 16 : 0));
  }
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

// ldmatrix.x4: lane L supplies the address of row L % 8 of matrix L / 8.
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const __nv_bfloat16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const __nv_bfloat16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// A fragment of k-step kk (16 columns from 16 * kk) of the 16-row strip starting at `row0` of a
// row-major swizzled tile (rows = M, columns = K).
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const __nv_bfloat16* tile, int row0, int kk, int lane) {
  const int r = row0 + (lane & 7) + 8 * ((lane >> 3) & 1);
  const int chunk = 2 * kk + (lane >> 4);
  ldsm_x4(a, tile + swz(r, chunk));
}
// A fragment of k-step kk when the tile is stored transposed: tile rows = K, columns = M (the strip's
// 16 M-columns start at col0).
__device__ __forceinline__ void load_a_trans(uint32_t (&a)[4], const __nv_bfloat16* tile, int col0, int kk,
                                             int lane) {
  // matrices: m0 (M 0-7, K 0-7), m1 (M 8-15, K 0-7), m2 (M 0-7, K 8-15), m3 (M 8-15, K 8-15); stored
  // as [K][M], so matrix m's 8 stored rows are K rows and the transpose gives the A layout.
  const int k = 16 * kk + (lane & 7) + 8 * (lane >> 4);
  const int chunk = (col0 >> 3) + ((lane >> 3) & 1);
  ldsm_x4_t(a, tile + swz(k, chunk));
}
// B fragments of two adjacent n-blocks (n0 .. n0+15) at k-step kk, for B[k][n] = tile[n][k] (the tile's
// rows are N, columns K: keys for S = Q K^T). b[0], b[1]: n-block n0; b[2], b[3]: n-block n0+8.
__device__ __forceinline__ void load_b_rows_n(uint32_t (&b)[4], const __nv_bfloat16* tile, int n0, int kk, int lane) {
  const int n = n0 + (lane & 7) + 8 * (lane >> 4);
  const int chunk = 2 * kk + ((lane >> 3) & 1);
  ldsm_x4(b, tile + swz(n, chunk));
}
// B fragments of two adjacent n-blocks (n0 .. n0+15) at k-step kk, for B[k][n] = tile[k][n] (the tile's
// rows are K: values for P V). b[0], b[1]: n-block n0; b[2], b[3]: n-block n0+8.
__device__ __forceinline__ void load_b_rows_k(uint32_t (&b)[4], const __nv_bfloat16* tile, int n0, int kk, int lane) {
  const int k = 16 * kk + (lane & 7) + 8 * ((lane >> 3) & 1);
  const int chunk = (n0 >> 3) + (lane >> 4);
  ldsm_x4_t(b, tile + swz(k, chunk));
}

// 2^x on the SFU (ex2.approx.ftz, what exp2f becomes under --use_fast_math). exp2f's default form adds
// range scaling for results below 2^-126 (3 more instructions per score): such probabilities are far below
// what P's bf16 rounding or the fp32 sums keep.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// ---- Strip products: one warp's 16-row strip times a staged 64-row tile. ----

// acc (16 x 64) += A . tile^T at k-step kk (16 of the 128 columns), where tile's rows are the 64 N
// positions (keys for S = Q K^T) and A's fragment for that k-step is `a`.
__device__ __forceinline__ void mma_kstep_by_rows_n(float (&acc)[8][4], const uint32_t (&a)[4],
                                                    const __nv_bfloat16* tile, int kk, int lane) {
#pragma unroll
  for (int nb2 = 0; nb2 < 4; ++nb2) {
    uint32_t b[4];
    load_b_rows_n(b, tile, 16 * nb2, kk, lane);
    mma(acc[2 * nb2], a, b[0], b[1]);
    mma(acc[2 * nb2 + 1], a, b[2], b[3]);
  }
}
// acc (16 x 64) += (rows a_row0 .. a_row0+15 of a_tile) . tile^T over all 128 columns.
__device__ __forceinline__ void mma_strip_by_rows_n(float (&acc)[8][4], const __nv_bfloat16* a_tile, int a_row0,
                                                    const __nv_bfloat16* tile, int lane) {
#pragma unroll
  for (int kk = 0; kk < 8; ++kk) {
    uint32_t a[4];
    load_a(a, a_tile, a_row0, kk, lane);
    mma_kstep_by_rows_n(acc, a, tile, kk, lane);
  }
}
// acc (16 x 128) += P . tile, where P (16 x 64) is the strip held as accumulators (rounded to bf16
// here: each accumulator pair is an A fragment) and tile's rows are the 64 K positions.
__device__ __forceinline__ void mma_acc_by_rows_k(float (&acc)[16][4], const float (&p)[8][4],
                                                  const __nv_bfloat16* tile, int lane) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    uint32_t a[4];
    a[0] = pack_bf16(p[2 * kk][0], p[2 * kk][1]);
    a[1] = pack_bf16(p[2 * kk][2], p[2 * kk][3]);
    a[2] = pack_bf16(p[2 * kk + 1][0], p[2 * kk + 1][1]);
    a[3] = pack_bf16(p[2 * kk + 1][2], p[2 * kk + 1][3]);
#pragma unroll
    for (int nd2 = 0; nd2 < 8; ++nd2) {
      uint32_t b[4];
      load_b_rows_k(b, tile, 16 * nd2, kk, lane);
      mma(acc[2 * nd2], a, b[0], b[1]);
      mma(acc[2 * nd2 + 1], a, b[2], b[3]);
    }
  }
}

}  // namespace quill::cuda::attn_tc

// ---- What the kernels read, and the host-side pieces shared by forward and backward. ----
namespace quill::cuda::attn_tc {

// The problem as the tensor-core kernels read it. `rb` is the bias-row table [T, H, E] fp32
// (rb[t, h, u] = sum_i r[t, h, i] * table[i, u]; see attention_tc_bias.cu), null when R == 0 or E == 0;
// `tau` is [T] fp32, null when log scaling is off (tau = 1).
struct TcProblem {
  int T, H, G, E;
  int window;   // 0: full causal
  float scale;  // of q . k
  const float* rb;
  const float* tau;
};

// attention_common.cuh's allowed() on a TcProblem. (Calling attn:: with (T, window) arguments instead
// changed the backward kernel's register allocation: more spills, measured with ptxas -v.)
__device__ __forceinline__ bool tc_allowed(const TcProblem& p, int t, int s) {
  return t < p.T && s <= t && (p.window == 0 || t - s < p.window);
}

// True when every (query, key) pair of the tile pair (queries t0..t0+63, keys s0..s0+63) is allowed,
// so the mask can be skipped.
__device__ __forceinline__ bool tile_fully_allowed(const TcProblem& p, int t0, int s0) {
  return s0 + kRows - 1 <= t0 && t0 + kRows <= p.T && (p.window == 0 || t0 + kRows - 1 - s0 < p.window);
}

// The bias of one tile pair, staged in shared memory. Query row r (t = t0 + r) needs rb[t, h, u] for the
// distances u = t - s0 - kc of its 64 keys kc, i.e. the contiguous run u_lo .. u_lo + 63 with
// u_lo = t - s0 - 63. Since t0 - s0 is a multiple of 64, u_lo = (r + 1) mod 4 (mod 4) for every tile pair,
// so the run starts (r + 1) & 3 floats into the 16-byte-aligned chunk at u_lo - ((r + 1) & 3): the row is
// staged as the 17 aligned chunks from there, and key kc of row r sits at bias_at(r, kc). With E a multiple of
// 4 a chunk is wholly inside or wholly outside [0, E), so whole chunks are copied or zero-filled (2 threads per
// row, 8-9 16-byte copies each; before: 64 4-byte copies per row with ~30 integer instructions each, ~45% of the
// forward kernel's instructions). Other E use 4-byte copies into the same layout. Zero where u is outside
// [0, E) or the row is past T. Row stride 68 floats (272 bytes, 16-byte aligned).
constexpr int kRbLd = 68;
constexpr int kRbTileFloats = kRows * kRbLd;
__device__ __forceinline__ int bias_at(int r, int kc) { return r * kRbLd + ((r + 1) & 3) + 63 - kc; }
__device__ __forceinline__ void load_bias_tile_async(float* rb_s, const TcProblem& p, int h, int t0, int s0, int tid,
                                                     int n_threads) {
  if (p.E % 4 == 0) {
    // n_threads = 128: thread tid copies chunks tid & 1, + 2, ... of row tid >> 1.
    for (int r = tid >> 1; r < kRows; r += n_threads >> 1) {
      const int t = t0 + r;
      const int u_al = t - s0 - 63 - ((r + 1) & 3);  // a multiple of 4
      const float* row = p.rb + (static_cast<int64_t>(min(t, p.T - 1)) * p.H + h) * p.E;
      for (int ch = tid & 1; ch < kRbLd / 4; ch += 2) {
        const int u = u_al + 4 * ch;
        const bool in = t < p.T && u >= 0 && u < p.E;
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(rb_s + r * kRbLd + 4 * ch)),
                     "l"(in ? row + u : p.rb), "r"(in ? 16 : 0));
      }
    }
    return;
  }
  for (int idx = tid; idx < kRows * kRows; idx += n_threads) {
    const int r = idx >> 6, kc = idx & 63;
    const int t = t0 + r, u = t - (s0 + kc);
    const bool in = t < p.T && u >= 0 && u < p.E;
    const float* src = in ? p.rb + (static_cast<int64_t>(t) * p.H + h) * p.E + u : p.rb;
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(rb_s + bias_at(r, kc))), "l"(src),
                 "r"(in ? 4 : 0));
  }
}
// dst[i] = src[t0 + i] for i < 64 (zero past T).
__device__ __forceinline__ void load_row_floats_async(float* dst, const float* src, int t0, int T, int tid,
                                                      int n_threads) {
  for (int i = tid; i < kRows; i += n_threads) {
    const bool in = t0 + i < T;
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst + i)), "l"(in ? src + t0 + i : src),
                 "r"(in ? 4 : 0));
  }
}

}  // namespace quill::cuda::attn_tc
