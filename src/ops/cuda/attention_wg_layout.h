// The arithmetic of the Hopper (wgmma + TMA) attention forward (attention_wg_forward.cu) that can be
// checked without a GPU: shared-memory matrix descriptors, the TMA 128-byte swizzle, the banded bias
// layout and the tile schedule. Pure C++ (no CUDA headers), constexpr, so the CPU tests
// (tests/ops/attention_wg_layout_test.cc) and static_asserts here pin every bit the kernel relies on.
// Design note: docs/decisions/attention-wgmma.md.
//
// Sources (PTX ISA 8.x, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate"):
//  - Matrix descriptor (64 bits): bits 0-13 start address, 16-29 leading-dimension byte offset (LBO),
//    32-45 stride-dimension byte offset (SBO), each encoded as (x & 0x3FFFF) >> 4; bits 49-51 matrix
//    base offset (0 when the swizzle pattern starts on a 1024-byte boundary); bits 62-63 swizzle
//    mode (0 none, 1 128-byte, 2 64-byte, 3 32-byte).
//  - K-major operand, 128-byte swizzle: rows of 128 bytes (64 bf16 along K), 8-row groups SBO apart;
//    LBO unused ("assumed 1"). A k16 slice inside the 128-byte row is addressed by moving the start
//    address 32 bytes per k-step (the swizzle is applied to the final address bits, so the base
//    offset stays 0 while the start stays inside the first 128-byte row of a 1024-byte atom).
//  - MN-major operand, 128-byte swizzle: 64 bf16 along MN contiguous (one 128-byte row per K index),
//    SBO = offset between groups of 8 K rows, LBO = offset between 64-element MN blocks.
//  - TMA SWIZZLE_128B writes 16-byte chunk c of 128-byte row r of a 1024-byte-aligned box at chunk
//    c ^ (r % 8) (address bits 4-6 XOR bits 7-9), the same pattern the descriptors above name.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define QUILL_WG_HD __host__ __device__
#else
#define QUILL_WG_HD
#endif

namespace quill::cuda::attn_wg {

constexpr int kD = 128;           // head dim of this path
constexpr int kWgRows = 64;       // query rows per consumer warpgroup (wgmma M)
constexpr int kConsumers = 2;     // consumer warpgroups per CTA
constexpr int kBlockM = kWgRows * kConsumers;  // query rows per CTA
constexpr int kBlockN = 64;       // keys per tile
constexpr int kStages = 3;        // K / V / bias pipeline depth
constexpr int kThreads = 128 * (1 + kConsumers);  // producer warpgroup + consumers

// One TMA box of bf16 rows: 64 rows x 64 columns (128 bytes), swizzled; a [64 x 128] tile is two.
constexpr int kRowBytes = 128;
constexpr int kHalfCols = kRowBytes / 2;          // bf16 columns per 128-byte row
constexpr int kBoxBytes = kWgRows * kRowBytes;    // 8 KiB, a multiple of the 1024-byte atom
constexpr int kTileBytes = 2 * kBoxBytes;         // 64 rows x 128 bf16
// Bias boxes: 64 query rows x 32 keys fp32 (128 bytes), swizzled; a 64 x 64 tile is two.
constexpr int kBiasCols = kRowBytes / 4;
constexpr int kBiasTileBytes = 2 * kBoxBytes;

// ---- wgmma shared-memory matrix descriptors ----

enum class Swizzle : uint64_t { kNone = 0, k128B = 1, k64B = 2, k32B = 3 };

QUILL_WG_HD constexpr uint64_t desc_field(uint32_t bytes) { return (bytes & 0x3FFFFu) >> 4; }

QUILL_WG_HD constexpr uint64_t make_desc(uint32_t smem_addr, uint32_t lbo_bytes, uint32_t sbo_bytes, Swizzle swizzle,
                                         uint32_t base_offset = 0) {
  return desc_field(smem_addr) | (desc_field(lbo_bytes) << 16) | (desc_field(sbo_bytes) << 32) |
         (static_cast<uint64_t>(base_offset & 7u) << 49) | (static_cast<uint64_t>(swizzle) << 62);
}

// 8 rows of 128 bytes: the stride between core-matrix groups in every operand here.
constexpr uint32_t kSbo = 8 * kRowBytes;
// K-major, 128-byte swizzle (B of S = Q K^T: the key tile, rows = keys, 128 bytes of head dim each).
// LBO is not used by swizzled K-major layouts; 16 bytes (encoded 1) is the conventional "1".
QUILL_WG_HD constexpr uint64_t k_major_desc(uint32_t smem_addr) { return make_desc(smem_addr, 16, kSbo, Swizzle::k128B); }
// MN-major, 128-byte swizzle (B of O += P V: the value tile, rows = keys, columns = head dim in two
// boxes kBoxBytes apart, which is the LBO: the step from head-dim columns 0-63 to 64-127).
QUILL_WG_HD constexpr uint64_t mn_major_desc(uint32_t smem_addr, uint32_t lbo_bytes = kBoxBytes) {
  return make_desc(smem_addr, lbo_bytes, kSbo, Swizzle::k128B);
}

// Byte offset inside a 1024-byte-aligned box of 128-byte rows, as TMA SWIZZLE_128B stores it, of
// byte `byte_in_row` of row `row`.
QUILL_WG_HD constexpr uint32_t swizzle128(uint32_t row, uint32_t byte_in_row) {
  return row * kRowBytes + ((((byte_in_row >> 4) ^ row) & 7u) << 4) + (byte_in_row & 15u);
}

// ---- The banded bias layout ----
//
// The bias of a (query t, key s) pair is rb(t, t - s) (a row of r times a table column) for distances
// u = t - s in [0, E), else 0. A TMA box must be a rectangle in some strided view of memory, and the
// pairs of a query tile by a key tile are a parallelogram in (t, u). So the forward stores the bias
// per key block of 32 keys: band[h][a][i][b] = bias(t = 32a + i, s = 32a + b), i in [0, I), b in
// [0, 32), with I = E + 32 rows (every i with some distance i - b in [0, E)); zero where the distance
// is outside [0, E) or t >= T. Then the bias of query rows t0 .. t0+63 by keys 32a .. 32a+31 is the box
// {32 keys, 64 rows} at (b = 0, i = t0 - 32a, a, h) of a 4-D tensor map with ordinary nested strides;
// rows i outside [0, I) (negative included) are out of bounds, which TMA fills with zeros.
// Size: H * A * I * 32 floats = H * T * (E + 32) floats, about the old [T, H, E] bias rows.
QUILL_WG_HD constexpr int64_t band_rows(int64_t E) { return E + 32; }                // I
QUILL_WG_HD constexpr int64_t band_blocks(int64_t T) { return (T + 31) / 32; }       // A
QUILL_WG_HD constexpr int64_t band_floats(int64_t T, int64_t H, int64_t E) {
  return H * band_blocks(T) * band_rows(E) * 32;
}
QUILL_WG_HD constexpr int64_t band_index(int64_t T, int64_t E, int64_t h, int64_t a, int64_t i, int64_t b) {
  return ((h * band_blocks(T) + a) * band_rows(E) + i) * 32 + b;
}
// The band slot of the pair (t, s), or -1 when the pair has no slot (|i| out of the band).
QUILL_WG_HD constexpr int64_t band_slot(int64_t T, int64_t E, int64_t h, int64_t t, int64_t s) {
  const int64_t a = s >> 5, b = s & 31, i = t - 32 * a;
  return (s < 0 || a >= band_blocks(T) || i < 0 || i >= band_rows(E)) ? -1 : band_index(T, E, h, a, i, b);
}
// The writer walks (t, u) with u in [-31, I) and t in [0, band_t_extent); the pair (t, s = t - u)
// owns a slot when band_slot(...) >= 0. Every slot is owned by exactly one such pair (the CPU test
// checks it), so the band needs no memset.
QUILL_WG_HD constexpr int64_t band_u_first() { return -31; }
QUILL_WG_HD constexpr int64_t band_u_count(int64_t E) { return band_rows(E) + 31; }
QUILL_WG_HD constexpr int64_t band_t_extent(int64_t T, int64_t E) { return 32 * band_blocks(T) + band_rows(E); }

// ---- Tile schedule of one CTA (query rows t0 .. t0 + kBlockM - 1) ----

// N: the key tile's width, kBlockN (64) in the forms with a producer warpgroup, 128 in the wide form.
// First key tile start: the window's first key rounded down to the tile (window 0 = full causal).
template <int N = kBlockN>
QUILL_WG_HD constexpr int first_key_tile(int t0, int window) {
  const int s_first = window > 0 ? (t0 - window + 1 > 0 ? t0 - window + 1 : 0) : 0;
  return (s_first / N) * N;
}
// Number of key tiles: up to the last key the CTA's last valid row sees.
template <int N = kBlockN>
QUILL_WG_HD constexpr int key_tile_count(int t0, int T, int window) {
  const int t_last = (t0 + kBlockM - 1 < T - 1) ? t0 + kBlockM - 1 : T - 1;
  return (t_last - first_key_tile<N>(t0, window)) / N + 1;
}
// True when every pair of query rows tw .. tw+63 by keys s0 .. s0+N-1 is allowed (no mask needed).
template <int N = kBlockN>
QUILL_WG_HD constexpr bool wg_tile_fully_allowed(int tw, int s0, int T, int window) {
  return s0 + N - 1 <= tw && tw + kWgRows <= T && (window == 0 || tw + kWgRows - 1 - s0 < window);
}
// True when some pair of the CTA's rows t0 .. t0+127 by keys s0 .. s0+N-1 has a distance below E (the
// bias tile is loaded, and both consumer warpgroups read it, exactly for these tiles).
template <int N = kBlockN>
QUILL_WG_HD constexpr bool cta_tile_has_bias(int t0, int s0, int E) { return E > 0 && t0 - (s0 + N - 1) < E; }

// ---- The geometry of the forward kernel ----
// kN keys per tile; K and V tiles [head-dim half][kN rows of 128 bytes] (so a half is kN / 64 TMA boxes and
// the rows run on at 128 bytes: the K-major B of S = Q K^T over kN rows, and V's MN-major LBO is a half);
// kKvStages stages of K and V; kBiasStages stages of each consumer's bias (kN / 32 band boxes); a producer
// warpgroup and kConsumers consumer warpgroups. kProducerRegisters / kConsumerRegisters: the registers each gets
// by setmaxnreg (0: none; the launch's 168 each), balanced so that 128 x producer + 256 x consumer <= 65,536.
// kTimedWaits: the mbarrier waits trap after ~4 s (a hang becomes an error); off where setmaxnreg is used,
// because ptxas 13.0 does not honour setmaxnreg in a kernel that can trap (docs/decisions/attention-wgmma.md).
// (A 128-key form without the producer warpgroup measured slower and was deleted: same note.)
template <int N, int KvStages, int BiasStages, int ProducerRegisters, int ConsumerRegisters>
struct FwdGeometryT {
  static constexpr int kN = N, kKvStages = KvStages, kBiasStages = BiasStages;
  static constexpr int kProducerRegisters = ProducerRegisters, kConsumerRegisters = ConsumerRegisters;
  static constexpr bool kTimedWaits = ConsumerRegisters == 0;
  static constexpr int kThreads = 128 * (kConsumers + 1);
  static constexpr int kHalfBytes = kN * kRowBytes;           // one head-dim half of a K or V tile
  static constexpr int kKvTileBytes = 2 * kHalfBytes;
  static constexpr int kBiasBytes = kWgRows * kN * 4;         // one consumer's bias tile (kN / 32 boxes)
  static constexpr int kSmemQ = 0;                            // [consumer][half] boxes
  static constexpr int kSmemK = kSmemQ + kConsumers * kTileBytes;
  static constexpr int kSmemV = kSmemK + kKvStages * kKvTileBytes;
  static constexpr int kSmemBias = kSmemV + kKvStages * kKvTileBytes;  // [consumer][stage]
  static constexpr int kSmemBarriers = kSmemBias + kConsumers * kBiasStages * kBiasBytes;
  // q_full, k_full/empty, v_full/empty [stage], bias_full/empty [consumer][stage]: 8 bytes each.
  static constexpr int kBarrierCount = 1 + 4 * kKvStages + 2 * kConsumers * kBiasStages;
  static constexpr int kSmemBytes = kSmemBarriers + 8 * kBarrierCount + 1024;  // + alignment slack
  static_assert(kProducerRegisters * 128 + kConsumerRegisters * 128 * kConsumers <= 65536,
                "setmaxnreg: the warpgroups' registers exceed the multiprocessor's");
  static_assert((kProducerRegisters == 0) == (kConsumerRegisters == 0), "setmaxnreg for both roles or neither");
};
// The narrow form (the default, measured): 64-key tiles, three stages, no setmaxnreg.
using FwdGeometry = FwdGeometryT<kBlockN, kStages, kStages, 0, 0>;
// The wide form (an experiment, --attention-forward-form wide): FlashAttention-3's 128-key tiles for head dim 128,
// two K / V stages and one bias stage per consumer (230,504 bytes), the consumers at 240 registers (S 64 + the two
// packed P 64 + O 64 at the peak) and the producer, one thread issuing TMA, at 24.
using FwdGeometryWide = FwdGeometryT<128, 2, 1, 24, 240>;

// ---- Shared memory of the forward kernel (byte offsets from a 1024-byte-aligned base) ----
constexpr int kSmemQ = 0;                                                  // [consumer][half] boxes
constexpr int kSmemK = kSmemQ + kConsumers * kTileBytes;                   // [stage][half]
constexpr int kSmemV = kSmemK + kStages * kTileBytes;                      // [stage][half]
constexpr int kSmemBias = kSmemV + kStages * kTileBytes;                   // [consumer][stage][box]
constexpr int kSmemBarriers = kSmemBias + kConsumers * kStages * kBiasTileBytes;
// q_full, k_full/empty, v_full/empty [stage], bias_full/empty [consumer][stage]: 8 bytes each.
constexpr int kBarrierCount = 1 + 4 * kStages + 2 * kConsumers * kStages;
constexpr int kSmemBytes = kSmemBarriers + 8 * kBarrierCount + 1024;       // + alignment slack
constexpr int kSmemLimit = 232448;  // sm_90 opt-in maximum per block (227 KiB)
static_assert(kSmemBytes <= kSmemLimit, "attention_wg: shared memory over the sm_90 limit");
static_assert(FwdGeometry::kSmemBytes == kSmemBytes && FwdGeometry::kSmemBias == kSmemBias && FwdGeometry::kSmemV == kSmemV,
              "the kernel's geometry is the plan above");
static_assert(FwdGeometryWide::kSmemBytes <= kSmemLimit && FwdGeometryWide::kSmemBias % 1024 == 0 &&
                  FwdGeometryWide::kSmemV % 1024 == 0,
              "attention_wg: the wide form's shared memory");
static_assert(kSmemK % 1024 == 0 && kSmemV % 1024 == 0 && kSmemBias % 1024 == 0 && kBoxBytes % 1024 == 0,
              "attention_wg: every swizzled box must start on a 1024-byte boundary");

// Hand-derived descriptor values (PTX ISA bit layout above), so a change to the encoder cannot
// silently move a field. K-major at 0x400: start 0x400 >> 4 = 0x40, LBO 16 >> 4 = 1 at bit 16, SBO
// 1024 >> 4 = 0x40 at bit 32, swizzle 1 at bit 62.
static_assert(k_major_desc(0x400) == 0x4000004000010040ull, "k_major_desc bit layout");
// MN-major at 0x2000, LBO 8192 >> 4 = 0x200 at bit 16, SBO 0x40 at bit 32, swizzle 1 at bit 62.
static_assert(mn_major_desc(0x2000) == 0x4000004002000200ull, "mn_major_desc bit layout");
static_assert(make_desc(0x3FFF0, 0, 0, Swizzle::kNone) == 0x3FFF, "start address keeps 14 bits");
static_assert(make_desc(0x40000, 0, 0, Swizzle::kNone) == 0, "start address bits above 17 are dropped");
static_assert(make_desc(0, 0, 0, Swizzle::k32B, 5) == ((3ull << 62) | (5ull << 49)), "base offset / swizzle fields");
static_assert(swizzle128(0, 0) == 0 && swizzle128(1, 0) == 128 + 16 && swizzle128(7, 16) == 7 * 128 + 6 * 16 &&
                  swizzle128(9, 36) == 9 * 128 + 3 * 16 + 4,
              "swizzle128 is chunk ^ (row % 8)");

}  // namespace quill::cuda::attn_wg
